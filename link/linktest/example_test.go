package linktest_test

import (
	"fmt"

	"github.com/ustack-dev/ustack/link/linktest"
)

// A wrapper or a device test attaches a Sink and injects what the wire
// would bring; a discipline test writes to a Writer that refuses what Take
// says.
func Example() {
	ep := linktest.NewEndpoint(&linktest.Writer{Take: func(n int) int { return n / 2 }})
	sink := linktest.NewSink()
	ep.Attach(sink)
	ep.Inject([]byte{0x45, 0, 0, 20})
	fmt.Println(len(sink.Packets()), "delivered")
	ep.Close()
	// Output: 1 delivered
}
