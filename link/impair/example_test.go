package impair_test

import (
	"fmt"
	"log"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/linktest"
)

// Wrap puts seeded faults around any endpoint: an embedder wraps the mem,
// tun or afpacket endpoint before giving it to stack.AddNIC. Here the
// wrapped endpoint is a linktest.Endpoint, into which the example injects
// what the wire would bring, and a linktest.Sink stands for the stack, so
// the counts can be read against a known number of packets.
func ExampleWrap() {
	lower := linktest.NewEndpoint(nil)
	ep, err := impair.Wrap(lower, &impair.Options{
		// The same seed draws the same faults: a failing run repeats.
		RX: link.Impairments{Loss: 0.1, Duplicate: 0.05, Seed: 42},
	})
	if err != nil {
		log.Fatal(err)
	}
	// The wrapper owns lower: closing it closes both, and joins its delay
	// goroutine.
	defer ep.Close()

	sink := linktest.NewSink() // stands for the stack
	ep.Attach(sink)
	for range 1000 {
		lower.Inject([]byte{0x45, 0, 0, 20})
	}

	rx, tx := ep.Counts()
	fmt.Printf("injected 1000: lost %d, duplicated %d, delivered %d\n", rx.Lost, rx.Duplicated, sink.Len())
	fmt.Println("sent packets untouched:", tx == impair.Counts{})
	// The same counts are in the wrapper's link.Stats, which a stack
	// exports with every NIC's counters.
	fmt.Println("ImpairLost:", ep.LinkStats().ImpairLost)
	// Output:
	// injected 1000: lost 85, duplicated 42, delivered 957
	// sent packets untouched: true
	// ImpairLost: 85
}
