package linkspec_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"

	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/linkspec"
	"github.com/ustack-dev/ustack/stack"
)

// A command names its link with one flag. Parse checks it before the
// command acquires any privilege or device; Device says whether Open (a
// kernel device) or OpenPair (an in-memory pair) opens it.
func ExampleParse() {
	for _, flag := range []string{"afpacket:veth0", "tun:tun0", "mem", "veth0"} {
		spec, err := linkspec.Parse(flag)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: kind %s, name %q, device %v\n", spec, spec.Kind, spec.Name, spec.Device())
	}

	// Open refuses a mem spec: a mem link is two endpoints.
	spec, _ := linkspec.Parse("mem")
	_, err := linkspec.Open(spec, nil)
	fmt.Println(errors.Is(err, linkspec.ErrPair))
	// Output:
	// afpacket:veth0: kind afpacket, name "veth0", device true
	// tun:tun0: kind tun, name "tun0", device true
	// mem: kind mem, name "", device false
	// link "veth0": unknown kind "veth0"; valid specs are afpacket:IFACE, tun:NAME or mem
	// true
}

// OpenPair opens both ends of a mem link, wrapped with package impair
// when Options.Impair is active, so each direction of the wire gets the
// faults. Here the faults are a fixed delay, which delays but never loses
// the ping, so the example always gets its reply.
func ExampleOpenPair() {
	im, err := link.ParseImpairments("delay=1ms,seed=1")
	if err != nil {
		log.Fatal(err)
	}
	a, b, err := linkspec.OpenPair(&linkspec.Options{Impair: im})
	if err != nil {
		log.Fatal(err)
	}
	// Each stack takes ownership of its end and closes it.
	client := host(a, "198.18.0.1/24")
	defer client.Close()
	server := host(b, "198.18.0.2/24")
	defer server.Close()

	if _, err := client.Ping(context.Background(), netip.MustParseAddr("198.18.0.2"), []byte("ping")); err != nil {
		log.Fatal(err)
	}
	// With faults the ends are impair wrappers, whose counts say what
	// the wire did to what each end received.
	rx, _ := b.(*impair.Endpoint).Counts()
	fmt.Printf("%T, server received %d delayed, %d lost\n", b, rx.Delayed, rx.Lost)
	// Output:
	// *impair.Endpoint, server received 1 delayed, 0 lost
}

// host builds a stack on ep with one address. On success the stack owns
// ep; on failure it is closed here.
func host(ep gstack.LinkEndpoint, addr string) *stack.Stack {
	st, err := stack.New(nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	nic, err := st.AddNIC(ep, nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	if err := st.AddAddress(nic, netip.MustParsePrefix(addr)); err != nil {
		log.Fatal(err)
	}
	return st
}
