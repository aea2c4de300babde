package stack

import (
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
)

// DefaultDelayedACK is what a zero TCPOptions.DelayedACK stands for: how
// long a NIC holds a pure ACK of a request/response flow for the answer to
// carry it. An answer that follows within a few tens of microseconds (a
// server answering from memory, tcp_rr) carries the ACK and saves one
// packet per exchange, as Linux's delayed ACK does. 1 ms stays below any
// Linux peer's timers for the unacknowledged answer (retransmission 200 ms
// minimum; tail loss probe 2 x SRTT plus 200 ms with one packet in flight,
// plus 2 ms with more) and far below Linux's own 40 ms delayed-ACK floor,
// so a flow whose answer is slower pays at most 1 ms on that exchange and
// then has its ACKs sent at once again.
const DefaultDelayedACK = time.Millisecond

// ackSlots bounds the flows an ackDelayer remembers as request/response:
// a direct-mapped table, so a flow can be forgotten when another hashes to
// its slot, which only means its next ACK is sent at once.
const ackSlots = 256

// flowKey is a TCP flow as seen from this host: source and destination
// address and port of its outgoing packets.
type flowKey struct {
	src, dst     tcpip.Address
	sport, dport uint16
}

func (k flowKey) slot() int { return int(uint(k.sport)*31+uint(k.dport)) % ackSlots }

// ackDelayer is gVisor's missing delayed ACK, in front of a NIC's queueing
// discipline. gVisor's TCP sends a pure ACK for every segment with data as
// soon as its processor goroutine has handled it; on a request/response
// flow the answer follows microseconds later carrying the same
// acknowledgement, so the pure ACK costs a whole packet (a system call
// and the peer's processing of it) for nothing. Linux sends it only if no
// answer came within its delayed-ACK timeout, and only once it has seen
// the flow answer ("pingpong" mode).
//
// The ackDelayer learns the same thing: a flow whose pure ACK was followed
// by its own segment with the same acknowledgement number within delay is
// request/response. From then on it holds that flow's next pure ACK (one
// at a time per NIC) for at most delay: a segment of the flow that
// acknowledges as much carries it, and the held one is dropped (counted in
// Merged); any other segment of the flow sends the held ACK first; the
// timer sends it otherwise (Expired), and the flow is no longer treated
// as request/response until it answers quickly again. Only a pure ACK
// (link.IsPureACK) is held: one with options other than timestamps (SACK
// blocks, in recovery), or with any flag besides ACK, is never held, nor is a second pure ACK of the flow
// while one is held (both leave: a receiver of bulk data still ACKs at
// least every other segment, as RFC 1122 asks). It is safe for concurrent
// use.
type ackDelayer struct {
	next  gstack.QueueingDiscipline
	delay time.Duration
	epoch time.Time // monotonic base of the nanosecond times below
	timer *time.Timer

	mu      sync.Mutex
	held    *gstack.PacketBuffer // the pure ACK held, with a reference; nil when none
	heldKey flowKey
	heldAck uint32
	heldAt  int64 // when held was taken
	// armed says the timer is set. It is set once for a run of holds,
	// not at every hold: resetting a Go timer wakes a thread to watch it
	// (the runtime's wakeNetPoller), which at one hold per exchange
	// cost a thread wake-up per transaction. expire re-arms it for what
	// is left of the delay of the ACK it finds held, so no ACK waits
	// longer than the delay, and some leave sooner.
	armed bool
	// The last pure ACK that left at once, to learn request/response
	// flows from.
	lastKey flowKey
	lastAck uint32
	lastAt  int64
	// watching is held != nil || lastKey is set, for the lock-free look
	// of WritePacket; written under mu.
	watching atomic.Bool
	rr       [ackSlots]flowKey // request/response flows, direct-mapped
	rrSet    [ackSlots]bool
	closed   bool
	writing  sync.WaitGroup // timer flushes in progress

	heldN, merged, expired atomic.Uint64
}

var _ gstack.QueueingDiscipline = (*ackDelayer)(nil)

// ACKStats are what a NIC's delayed ACK did.
type ACKStats struct {
	// Held counts pure ACKs held back; Merged those of them dropped
	// because a segment of the flow carried their acknowledgement;
	// Expired those sent when the delay ran out. The rest were sent
	// before a later segment of the flow, or dropped at Close.
	Held, Merged, Expired uint64
	// Holding is 1 while an ACK is held, 0 otherwise. gVisor counts a
	// held ACK as sent (its NIC's Tx.Packets) when it is handed over, so
	// that count is the link's plus Merged plus Holding.
	Holding uint64
}

// newACKDelayer returns next behind a delayed ACK of delay. It owns next.
func newACKDelayer(next gstack.QueueingDiscipline, delay time.Duration) *ackDelayer {
	a := &ackDelayer{next: next, delay: delay, epoch: time.Now()}
	a.timer = time.AfterFunc(time.Hour, a.expire)
	a.timer.Stop()
	return a
}

func (a *ackDelayer) stats() ACKStats {
	a.mu.Lock()
	holding := a.held != nil
	a.mu.Unlock()
	st := ACKStats{Held: a.heldN.Load(), Merged: a.merged.Load(), Expired: a.expired.Load()}
	if holding {
		st.Holding = 1
	}
	return st
}

// tcpHeader returns the TCP header of an outgoing packet, or nil for
// anything else.
func tcpHeader(pkt *gstack.PacketBuffer) header.TCP {
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber {
		return nil
	}
	t := header.TCP(pkt.TransportHeader().Slice())
	if len(t) < header.TCPMinimumSize {
		return nil
	}
	return t
}

// flowOf returns the flow of an outgoing TCP segment whose header is t, or
// ok false if its network header is not one.
func flowOf(pkt *gstack.PacketBuffer, t header.TCP) (k flowKey, ok bool) {
	nh := pkt.NetworkHeader().Slice()
	switch pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		if len(nh) < header.IPv4MinimumSize {
			return k, false
		}
		ip := header.IPv4(nh)
		k.src, k.dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		if len(nh) < header.IPv6MinimumSize {
			return k, false
		}
		ip := header.IPv6(nh)
		k.src, k.dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return k, false
	}
	k.sport, k.dport = t.SourcePort(), t.DestinationPort()
	return k, true
}

// WritePacket implements gstack.QueueingDiscipline.
func (a *ackDelayer) WritePacket(pkt *gstack.PacketBuffer) tcpip.Error {
	t := tcpHeader(pkt)
	if t == nil || pkt.NetworkPacketInfo.IsForwardedPacket {
		// A routed segment is another host's: its ACKs are that host's
		// to time (Options.Routing).
		return a.next.WritePacket(pkt)
	}
	pure := link.IsPureACK(t, len(t)+pkt.Data().Size())
	// Any other segment matters only while an ACK is held or a pure ACK
	// waits to see whether its flow answers: a bulk sender's segments
	// pass with no lock and no clock (BenchmarkACKDelayer/data).
	if !pure && !a.watching.Load() {
		return a.next.WritePacket(pkt)
	}
	k, ok := flowOf(pkt, t)
	if !ok {
		return a.next.WritePacket(pkt)
	}
	ack := t.AckNumber()
	now := int64(time.Since(a.epoch))
	slot := k.slot()
	var first *gstack.PacketBuffer // a held ACK to send before pkt
	a.mu.Lock()
	if a.held != nil && a.heldKey == k {
		if !pure && t.Flags()&header.TCPFlagAck != 0 && int32(ack-a.heldAck) >= 0 {
			a.held.DecRef()
			a.merged.Add(1)
		} else {
			first = a.held
			if pure {
				a.rrSet[slot] = false // ACKing a stream: send them at once
			}
		}
		a.held = nil
	}
	switch {
	case pure && a.held == nil && first == nil && !a.closed && a.rrSet[slot] && a.rr[slot] == k:
		pkt.IncRef()
		a.held, a.heldKey, a.heldAck, a.heldAt = pkt, k, ack, now
		a.heldN.Add(1)
		if !a.armed {
			a.armed = true
			a.timer.Reset(a.delay)
		}
		a.watchLocked()
		a.mu.Unlock()
		return nil
	case pure:
		a.lastKey, a.lastAck, a.lastAt = k, ack, now
	case a.lastKey == k && ack == a.lastAck && now-a.lastAt <= int64(a.delay):
		// The flow answered within the delay, acknowledging nothing new:
		// its last pure ACK was for nothing.
		a.rr[slot], a.rrSet[slot] = k, true
		a.lastKey = flowKey{}
	case now-a.lastAt > int64(a.delay):
		a.lastKey = flowKey{} // no answer came in time: stop watching
	}
	a.watchLocked()
	a.mu.Unlock()
	if first != nil {
		a.next.WritePacket(first)
		first.DecRef()
	}
	return a.next.WritePacket(pkt)
}

// watchLocked publishes whether segments other than pure ACKs need a
// look (see WritePacket); the caller holds mu.
func (a *ackDelayer) watchLocked() {
	a.watching.Store(a.held != nil || a.lastKey != (flowKey{}))
}

// expire sends the held ACK when the delay ran out, and forgets its flow
// as request/response.
func (a *ackDelayer) expire() {
	a.mu.Lock()
	h := a.held
	if h != nil && !a.closed {
		if left := a.heldAt + int64(a.delay) - int64(time.Since(a.epoch)); left > 0 {
			a.timer.Reset(time.Duration(left))
			a.mu.Unlock()
			return
		}
	}
	a.armed = false
	a.held = nil
	if h != nil {
		if s := a.heldKey.slot(); a.rr[s] == a.heldKey {
			a.rrSet[s] = false
		}
		a.expired.Add(1)
		a.writing.Add(1)
	}
	a.watchLocked()
	a.mu.Unlock()
	if h != nil {
		a.next.WritePacket(h)
		h.DecRef()
		a.writing.Done()
	}
}

// Close implements gstack.QueueingDiscipline: a held ACK is dropped (the
// NIC is going away), a timer flush in progress is waited for, and the
// discipline behind is closed.
func (a *ackDelayer) Close() {
	a.mu.Lock()
	a.closed = true
	h := a.held
	a.held = nil
	a.watchLocked()
	a.mu.Unlock()
	a.timer.Stop()
	if h != nil {
		h.DecRef()
	}
	a.writing.Wait()
	a.next.Close()
}

// linkQdisc is gVisor's default path to a link (a nil QDisc): each packet
// goes straight to the endpoint's WritePackets, in the caller's goroutine.
// The ackDelayer stands in front of it for sched.None.
type linkQdisc struct{ ep gstack.LinkWriter }

var _ gstack.QueueingDiscipline = linkQdisc{}

// WritePacket implements gstack.QueueingDiscipline.
func (l linkQdisc) WritePacket(pkt *gstack.PacketBuffer) tcpip.Error {
	var pkts gstack.PacketBufferList
	pkts.PushBack(pkt)
	_, err := l.ep.WritePackets(pkts)
	return err
}

// Close implements gstack.QueueingDiscipline.
func (linkQdisc) Close() {}
