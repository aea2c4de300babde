package linkutil

import (
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// groBucketSize is how many packets one of GRO's buckets holds (gVisor's
// unexported groBucketSize, 8).
const groBucketSize = 8

// GRO is one receive queue's generic receive offload: the TCP segments of
// one receive round (a recvmmsg, a run of reads, a Write) that continue
// each other are coalesced by gVisor's stack/gro before they climb the
// stack, so that TCP handles a few large segments instead of many
// MTU-sized ones. It is the one GRO wiring of ustack's links (pktio,
// afpacket, tun).
//
// A round is Begin, Enqueue for each packet, then Flush; nothing is held
// past Flush, so a packet never waits for a later round (a round ends when
// the device has nothing more to read, so GRO adds no latency of its own).
//
// Every packet enqueued must have NetworkProtocolNumber set, and verified
// checksums (RXChecksumValidated): a merged segment's TCP checksum no
// longer matches, so an endpoint using GRO verifies what it receives
// itself and claims stack.CapabilityRXChecksumOffload (gVisor's NIC
// overwrites RXChecksumValidated with that capability).
//
// A GRO is not safe for concurrent use: it belongs to whoever runs the
// queue's receive round (the holder of its PollGate.Owner).
type GRO struct {
	g    gro.GRO
	on   bool
	held int // packets enqueued since the last Flush

	rounds *Rounds // the link's discipline hooks, if SetRounds
	open   bool    // a round of rounds is open
	end    func()  // what closes it; nil when no discipline listens
}

// SetRounds makes g the edge of the link's transmit rounds
// (sched.RoundNotifier): a round of r opens before the first packet a
// receive round enqueues, and closes after Flush delivered the last, so
// that what the delivery writes leaves in one flush. A receive round that
// found nothing opens none.
func (g *GRO) SetRounds(r *Rounds) { g.rounds = r }

// Init readies g. With on false, Enqueue hands every packet up at once,
// uncoalesced (for comparison).
func (g *GRO) Init(on bool) {
	g.on = on
	g.g.Init(on)
}

// Enabled reports whether g coalesces.
func (g *GRO) Enabled() bool { return g.on }

// Begin starts a round delivering to d, which must not be nil.
func (g *GRO) Begin(d stack.NetworkDispatcher) { g.g.Dispatcher = d }

// Enqueue hands pkt to the round's dispatcher, now or by the round's Flush
// (coalesced with the segments around it). The caller keeps its reference
// and drops it when Enqueue returns, as after DeliverNetworkPacket.
//
// IPv6 packets go up at once, uncoalesced: gVisor's GRO leaks a buffer
// reference for every IPv6 packet it inspects (its dispatch6 walks the
// extension headers with an IPv6PayloadIterator over a clone of the
// packet, and never releases the iterator), so that every chunk an IPv6
// packet touched would stay out of the buffer pool for good.
func (g *GRO) Enqueue(pkt *stack.PacketBuffer) {
	if g.rounds != nil && !g.open {
		g.open = true
		g.end = g.rounds.Begin()
	}
	if pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber {
		g.g.Dispatcher.DeliverNetworkPacket(pkt.NetworkProtocolNumber, pkt)
		return
	}
	g.g.Enqueue(pkt)
	if g.on {
		g.held++
	}
}

// Flush ends the round: every packet still held is delivered. gVisor's
// gro.Flush delivers only the oldest packet of each bucket (it walks each
// bucket's list while removing from it, and a removed entry's link is
// reset), so it is called once per slot a bucket has; the later calls find
// the buckets empty at once. A round with nothing enqueued costs nothing.
// Then the transmit round (SetRounds) closes.
func (g *GRO) Flush() {
	if g.held > 0 {
		for range min(g.held, groBucketSize) {
			g.g.Flush()
		}
		g.held = 0
	}
	if g.open {
		end := g.end
		g.open, g.end = false, nil
		if end != nil {
			end()
		}
	}
}
