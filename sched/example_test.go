package sched_test

import (
	"fmt"
	"log"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/sched"
)

// A discipline is built by name over any gVisor link writer. A stack NIC
// does this itself (stack.NICOptions.Qdisc); here the writer is a
// linktest.Writer, standing for a device that takes everything, so the
// discipline's own counters can be read alone.
func ExampleNew() {
	name := sched.EnqLock
	if !sched.Known(name) { // how a command checks its -qdisc flag
		log.Fatalf("qdisc %q: want one of %v", name, sched.Names())
	}
	fmt.Println(name+":", sched.Describe(name))

	w := &linktest.Writer{}
	q, err := sched.New(name, w, nil)
	if err != nil {
		log.Fatal(err)
	}
	// The caller owns the discipline; a NIC closes its own on removal.
	defer q.Close()

	for range 10 {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, 100))})
		if err := q.WritePacket(pkt); err != nil {
			log.Fatal(err)
		}
		pkt.DecRef() // the discipline took its own reference
	}

	// Every discipline of ours reports Stats; gVisor's none and fifo do
	// not, so the Reporter is found by type assertion. One sender writing
	// into an empty queue that nobody runs is sent at once (bypass).
	st := q.(sched.Reporter).QdiscStats()
	fmt.Printf("offered %d, sent %d (%d bypassed, %d bytes), backlog %d, link took %d\n",
		st.Offered, st.Sent, st.Bypassed, st.Bytes, st.Backlog, w.Taken())
	// Output:
	// enqlock: ours: enqueuers take an enqueue lock, the dequeuer only the root lock (2010 netdev RFC)
	// offered 10, sent 10 (10 bypassed, 1000 bytes), backlog 0, link took 10
}
