package linkutil

import (
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"

	"github.com/ustack-dev/ustack/link"
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
// A round's pure ACKs are thinned as well: of the pure ACKs of one TCP
// flow in a round, only the last of a run whose acknowledgement numbers
// grow goes up (see tcpFlowOf). gVisor's TCP sends what every ACK lets
// it send at once, cut into super-segments of at most 64 KiB, and has no
// TSO deferral; a bulk sender behind a Linux receiver gets about one ACK
// per two segments, each opening about 86 KB, which it sent as 64 KB plus
// the rest. Handling a round's ACKs as one opens their sum at once, so
// the sender cuts fewer, fuller super-segments, and its TCP handles one
// ACK instead of several (docs/results.md has what scripts/http.sh
// measured of it). TCP's ACKs are cumulative, so
// the dropped ones told TCP nothing the kept one does not; what only an
// earlier ACK carries (SACK blocks, a duplicate's loss signal, ECN) keeps
// it from being dropped.
//
// Both are for the host's own TCP only: a routed segment larger than the
// MTU cannot leave (gVisor's forwarding drops what it would have to
// fragment, and keeps no GSO marking to cut it again), and a thinned ACK
// changes a routed flow's ACK clock. SetCoalescing(false), which a
// routing stack calls on every NIC (link.Coalescer), hands every
// packet up as it came.
//
// A GRO is not safe for concurrent use: it belongs to whoever runs the
// queue's receive round (the holder of its PollGate.Owner).
type GRO struct {
	g    gro.GRO
	on   bool // coalescing and thinning in this round
	want bool // Init's on
	// off is SetCoalescing(false), from any goroutine; the round's owner
	// applies it at the next Begin, between rounds, when nothing is held.
	off  atomic.Bool
	held int // packets enqueued since the last Flush

	acks  [groBucketSize]heldACK // pure ACKs held for the round, acks[:nacks]
	nacks int
	// thinned counts the ACKs a later one replaced; read by LinkStats
	// from any goroutine.
	thinned atomic.Uint64

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
// uncoalesced and unthinned (for comparison).
func (g *GRO) Init(on bool) {
	g.want = on
	g.on = on && !g.off.Load()
	g.g.Init(g.on)
}

// SetCoalescing turns coalescing and ACK thinning off (on false) or back
// to what Init asked (link.Coalescer). Safe from any goroutine: it takes
// effect from the next round.
func (g *GRO) SetCoalescing(on bool) { g.off.Store(!on) }

// ThinnedACKs returns how many pure ACKs a later ACK of their flow
// replaced (link.Stats.RXThinnedACKs). Safe from any goroutine.
func (g *GRO) ThinnedACKs() uint64 { return g.thinned.Load() }

// Enabled reports whether g coalesces.
func (g *GRO) Enabled() bool { return g.on }

// Begin starts a round delivering to d, which must not be nil.
func (g *GRO) Begin(d stack.NetworkDispatcher) {
	if on := g.want && !g.off.Load(); on != g.on {
		// The last round's Flush left nothing held, so gVisor's GRO can
		// be set up again.
		g.on = on
		g.g.Init(on)
	}
	g.g.Dispatcher = d
}

// Enqueue hands pkt to the round's dispatcher, now or by the round's Flush
// (coalesced with the segments around it), unless pkt is a pure ACK that
// a later one of its flow in the round replaces. The caller keeps its reference
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
	// A packet longer than any pure ACK, with no ACK held, skips the
	// parse: a bulk receiver's data segments.
	if g.on && (g.nacks > 0 || pkt.Data().Size() <= maxPureACK) {
		f, ack, pure := tcpFlowOf(pkt)
		switch {
		case pure:
			g.holdACK(pkt, f, ack)
			return
		case g.nacks > 0 && f.proto != 0:
			// Whatever else the flow sends follows its held ACK.
			g.releaseACK(f)
		}
	}
	g.deliver(pkt)
}

// deliver hands pkt to gVisor's GRO, or up at once if it is IPv6.
func (g *GRO) deliver(pkt *stack.PacketBuffer) {
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
	for i := range g.nacks {
		a := &g.acks[i]
		g.deliver(a.pkt)
		a.pkt.DecRef()
		*a = heldACK{}
	}
	g.nacks = 0
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

// maxPureACK is the longest a pure ACK can be: the largest IPv4 header
// (IPv6's fixed one is shorter) and TCP header.
const maxPureACK = header.IPv4MaximumHeaderSize + header.TCPHeaderMaximumSize

// flowID names one direction of a TCP flow; proto 0 is no TCP flow.
type flowID struct {
	src, dst tcpip.Address
	ports    uint32
	proto    tcpip.NetworkProtocolNumber
}

// heldACK is a pure ACK a round holds until its end, or until its flow
// sends something else, or until a later ACK of its flow replaces it.
type heldACK struct {
	pkt  *stack.PacketBuffer
	flow flowID
	ack  seqnum.Value
}

// holdACK holds the pure ACK pkt of flow f, acknowledging ack: it replaces
// the flow's held ACK if ack is beyond that one's (the later ACK says all
// the earlier one did: a higher acknowledgement, a newer window and
// timestamp), and otherwise delivers the held one first (a duplicate ACK
// or one acknowledging less must reach TCP as it came: it may be a loss
// signal or a window update). With every slot taken, the oldest goes up.
func (g *GRO) holdACK(pkt *stack.PacketBuffer, f flowID, ack seqnum.Value) {
	for i := range g.nacks {
		a := &g.acks[i]
		if a.flow != f {
			continue
		}
		if a.ack.LessThan(ack) {
			a.pkt.DecRef()
			g.thinned.Add(1)
		} else {
			g.deliver(a.pkt)
			a.pkt.DecRef()
		}
		// Move it to the end, keeping the slots in arrival order.
		copy(g.acks[i:], g.acks[i+1:g.nacks])
		g.nacks--
		break
	}
	if g.nacks == len(g.acks) {
		g.deliver(g.acks[0].pkt)
		g.acks[0].pkt.DecRef()
		copy(g.acks[:], g.acks[1:])
		g.nacks--
	}
	g.acks[g.nacks] = heldACK{pkt: pkt.IncRef(), flow: f, ack: ack}
	g.nacks++
}

// releaseACK delivers the ACK held for flow f, if any.
func (g *GRO) releaseACK(f flowID) {
	for i := range g.nacks {
		if a := &g.acks[i]; a.flow == f {
			g.deliver(a.pkt)
			a.pkt.DecRef()
			copy(g.acks[i:], g.acks[i+1:g.nacks])
			g.nacks--
			g.acks[g.nacks] = heldACK{}
			return
		}
	}
}

// tcpFlowOf returns the TCP flow pkt belongs to (proto 0 if it is no
// TCP segment with a plain IP header), its acknowledgement number, and
// whether it is thinnable: a pure ACK (link.IsPureACK). Anything else
// carries news a later ACK does not repeat, and goes up as it came.
func tcpFlowOf(pkt *stack.PacketBuffer) (flowID, seqnum.Value, bool) {
	var (
		f      flowID
		tcpOff int
		tcpLen int
	)
	switch pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		b, ok := pkt.Data().PullUp(header.IPv4MinimumSize)
		if !ok {
			return flowID{}, 0, false
		}
		ip := header.IPv4(b)
		hl := int(ip.HeaderLength())
		if ip.TransportProtocol() != header.TCPProtocolNumber || hl < header.IPv4MinimumSize || ip.More() || ip.FragmentOffset() != 0 || int(ip.TotalLength()) > pkt.Data().Size() || int(ip.TotalLength()) < hl {
			return flowID{}, 0, false
		}
		f.src, f.dst, f.proto = ip.SourceAddress(), ip.DestinationAddress(), header.IPv4ProtocolNumber
		tcpOff, tcpLen = hl, int(ip.TotalLength())-hl
	case header.IPv6ProtocolNumber:
		b, ok := pkt.Data().PullUp(header.IPv6MinimumSize)
		if !ok {
			return flowID{}, 0, false
		}
		ip := header.IPv6(b)
		if tcpip.TransportProtocolNumber(ip.NextHeader()) != header.TCPProtocolNumber || header.IPv6MinimumSize+int(ip.PayloadLength()) > pkt.Data().Size() {
			return flowID{}, 0, false
		}
		f.src, f.dst, f.proto = ip.SourceAddress(), ip.DestinationAddress(), header.IPv6ProtocolNumber
		tcpOff, tcpLen = header.IPv6MinimumSize, int(ip.PayloadLength())
	default:
		return flowID{}, 0, false
	}
	if tcpLen < header.TCPMinimumSize {
		return flowID{}, 0, false
	}
	b, ok := pkt.Data().PullUp(tcpOff + min(tcpLen, header.TCPHeaderMaximumSize))
	if !ok {
		return flowID{}, 0, false
	}
	tcp := header.TCP(b[tcpOff:])
	f.ports = uint32(tcp.SourcePort())<<16 | uint32(tcp.DestinationPort())
	ack := seqnum.Value(tcp.AckNumber())
	return f, ack, link.IsPureACK(tcp, tcpLen)
}
