package stacktest_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// A test outside package stack gets two connected hosts with one call
// (stacktest.New(t, opts) closes them when the test ends; Build leaves
// that to the caller), here with each direction of the wire delayed by
// package impair, the same wrapper ustack bench -impair uses.
func ExampleBuild() {
	im := link.Impairments{Delay: time.Millisecond / 2, Seed: 1} // each way: delays, never loses
	p, err := stacktest.Build(&stacktest.Options{WrapLink: stacktest.Impaired(im)})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	// Both hosts have an IPv4 and an IPv6 address; A reaches B at each.
	for _, dst := range []netip.Addr{stacktest.B4, stacktest.B6} {
		if _, err := p.A.Ping(context.Background(), dst, []byte("ping")); err != nil {
			log.Fatal(err)
		}
		fmt.Println("reply from", dst)
	}
	// The wrappers count what the wire did to what each host received:
	// B got both echo requests late.
	_, b := p.LinkStats()
	fmt.Println("delayed on the way to B:", b.ImpairDelayed)
	// Output:
	// reply from 198.18.0.2
	// reply from fd00::2
	// delayed on the way to B: 2
}
