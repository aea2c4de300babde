package link_test

import (
	"fmt"
	"log"

	"github.com/ustack-dev/ustack/link"
)

// An endpoint with several queues reports their sum, and a caller that
// watches several endpoints sums them the same way: Add is the one sum,
// so a counter added to Stats is never left out of a total.
func ExampleStats_Add() {
	queues := []link.Stats{
		{TXPackets: 10, TXCalls: 2, RXPackets: 7, RXRounds: 1},
		{TXPackets: 30, TXCalls: 3, RXPackets: 5, RXRounds: 2, RXDetached: 1},
	}
	var total link.Stats
	for _, q := range queues {
		total.Add(q)
	}
	// TXPackets/TXCalls is the mean batch the writers achieved.
	fmt.Printf("tx %d packets in %d calls (batch %.0f), rx %d, dropped detached %d\n",
		total.TXPackets, total.TXCalls, float64(total.TXPackets)/float64(total.TXCalls),
		total.RXPackets, total.RXDetached)
	// Output:
	// tx 40 packets in 5 calls (batch 8), rx 12, dropped detached 1
}

// Commands read faults from a flag (ustack bench -impair, serve -impair)
// with ParseImpairments, and hand the result to package impair, or to
// linkspec.Options.Impair, which wraps the endpoint they open.
func ExampleParseImpairments() {
	im, err := link.ParseImpairments("loss=1%,reorder=0.5%,delay=2ms,jitter=1ms,seed=7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(im.Active(), im.Loss, im.Delay)
	// String is the flag's syntax, so a run can log the faults it injected
	// and be repeated with the same seed.
	fmt.Println(im)

	// A bad value is refused with what is wrong, before anything opens.
	_, err = link.ParseImpairments("loss=150%")
	fmt.Println(err)
	// Output:
	// true 0.01 2ms
	// loss=1%,reorder=0.5%,delay=2ms,jitter=1ms,seed=7
	// impairment "loss=150%": "150": must be from 0% to 100%
}
