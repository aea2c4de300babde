package forward

import (
	"context"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// This file admits TCP handshakes: the time from a peer's SYN to the
// handler's answer (Accept or Reject), during which a Relay dials the
// destination. Limits on handshakes exist so that SYNs to destinations
// that never answer cannot hold every slot and starve the rest; they must
// never refuse a burst to a destination that does answer. So:
//
//   - A destination earns trust by answering: each handshake to it
//     answered within SlowHandshake lets two more run at once without
//     counting (TCP's slow start, for connects), so a burst to a live
//     server grows to its full size in a few round trips, while one that
//     answered a few and then went silent (a full listen queue) gets a
//     few free ones only. A handshake that takes longer ends the trust.
//     Trust is remembered for destinationMemory after the last answer.
//   - Any other handshake counts against MaxHalfOpen, against its
//     destination's share (a quarter) and its peer's (a half) from its
//     SYN, and so does a free one once it has waited SlowHandshake. The
//     shares keep one dead destination, or one peer's flood, from holding
//     the whole pool: connections elsewhere, and other peers', still
//     start.
//   - A handshake that finds no room waits its turn, and starts as soon as
//     there is room or its destination earned trust. One that waited
//     SlowHandshake, one to a destination whose share is held by slow
//     handshakes, or one beyond MaxTCP waiting, is refused; a free one
//     that turns slow and finds no room is refused then, and its
//     handler's context cancelled.
//
// Every refusal is a reset to the peer, counted as HalfOpen: gVisor's own
// limit on pending requests, which drops SYNs silently (the peer then
// retries for up to a minute), is set so high it never applies.

// trustPerAnswer is how many more handshakes to a destination may run
// free at once for each one it answered in time: two, as slow start
// grows the congestion window by one segment per ACK (RFC 5681), which
// doubles it per round trip.
const trustPerAnswer = 2

// destinationMemory is how long a destination that answered a handshake
// within SlowHandshake stays known to answer, so that a client's next
// burst to it, seconds later, starts at once as well. Long against the
// pauses between a client's requests to one server (HTTP keep-alive
// timeouts are 5 s to 2 min), short against how long a host stays up or
// down: a destination that stops answering is noticed by its first slow
// handshake anyway.
const destinationMemory = time.Minute

// maxDestinations bounds the destinations remembered to answer (about
// 200 bytes each): beyond it the idle ones are forgotten, which costs
// their next handshake a count, nothing else.
const maxDestinations = 1 << 16

// Where a handshake is in admission.
type admState uint8

const (
	admNew     admState = iota // not admitted yet
	admWaiting                 // waiting for room, in the queue
	admFree                    // running, to a destination that answers
	admCounted                 // running, counted against the limits
	admDone                    // answered or refused
)

// admission is the state of the handshakes, guarded by Forwarder.mu.
type admission struct {
	dsts    map[netip.AddrPort]*dstState
	srcs    map[netip.Addr]int // counted handshakes by peer address
	counted int                // counted handshakes in all
	running int                // handshakes whose handler has them
	// The waiting handshakes, oldest first.
	head, tail *TCPRequest
	waiting    int
}

// dstState is what admission knows of one destination.
type dstState struct {
	counted, free, waiting int
	running                map[*TCPRequest]struct{} // free or counted
	// trust is how many handshakes may run free at once; answered is when
	// one was last answered within SlowHandshake, slow when one last
	// waited longer.
	trust          int
	answered, slow time.Time
}

// trusted reports whether one more handshake to the destination may run
// free.
func (d *dstState) trusted(now time.Time) bool {
	return d.free < d.trust && now.Sub(d.answered) < destinationMemory
}

// remembered reports whether the destination's trust is worth keeping.
func (d *dstState) remembered(now time.Time) bool {
	return d.trust > 0 && now.Sub(d.answered) < destinationMemory
}

// idle reports whether nothing of the destination's is under way.
func (d *dstState) idle() bool { return d.waiting == 0 && len(d.running) == 0 }

// strictHalfOpen reports Options.SlowHandshake < 0: every handshake counts
// from its SYN, and one that finds no room is refused at once.
func (f *Forwarder) strictHalfOpen() bool { return f.o.SlowHandshake < 0 }

func (f *Forwarder) dstShare() int { return max(1, f.o.MaxHalfOpen/4) }
func (f *Forwarder) srcShare() int { return max(1, f.o.MaxHalfOpen/2) }

// handleSegment is the stack's handler for TCP segments no endpoint
// wanted: SYNs go to gVisor's forwarder (and so to handleTCP), anything
// else is left to gVisor, which answers with a reset. A SYN with RST or
// FIN also set is dropped and counted (Malformed), as Linux drops it: it
// opens nothing.
func (f *Forwarder) handleSegment(id gstack.TransportEndpointID, pkt *gstack.PacketBuffer) bool {
	th := header.TCP(pkt.TransportHeader().Slice())
	if len(th) >= header.TCPMinimumSize {
		flags := th.Flags()
		if flags.Contains(header.TCPFlagSyn) && flags.Intersects(header.TCPFlagRst|header.TCPFlagFin) {
			f.refuse(Malformed)
			return true
		}
	}
	return f.fwd.HandlePacket(id, pkt)
}

// handleTCP takes a SYN gVisor's forwarder passed on, in a goroutine of
// the forwarder's: it admits the handshake (waiting for room if need be)
// and hands it to the handler, or refuses it with a reset.
func (f *Forwarder) handleTCP(r *tcp.ForwarderRequest) {
	if !f.begin() {
		f.refuse(Closing)
		r.Complete(true)
		return
	}
	defer f.wg.Done()
	id := r.ID()
	req := &TCPRequest{
		f: f, r: r,
		src:     netip.AddrPortFrom(addrOf(id.RemoteAddress), id.RemotePort),
		dst:     netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort),
		arrived: time.Now(),
	}
	req.ctx, req.cancel = context.WithCancel(f.ctx)
	defer req.cancel()
	if reason, ok := f.admit(req); !ok {
		f.refuse(reason)
		r.Complete(true)
		return
	}
	defer req.Reject(true) // if the handler did not answer
	f.h.HandleTCP(req)
}

// admit admits req: at once, after a wait for room, or not at all (the
// reason why). Once admitted, req holds its flow.
func (f *Forwarder) admit(req *TCPRequest) (Reason, bool) {
	f.mu.Lock()
	now := req.arrived
	a := &f.adm
	d := f.dstLocked(req.dst, now)
	req.d = d
	switch {
	case f.strictHalfOpen():
		if !f.roomLocked(req) {
			f.forgetLocked(req.dst, d, now)
			f.mu.Unlock()
			return HalfOpen, false
		}
		f.startLocked(req, true)
	case d.trusted(now):
		f.startLocked(req, false)
	case f.roomLocked(req):
		f.startLocked(req, true)
	case d.counted >= f.dstShare() && d.slow.After(d.answered), a.waiting >= f.o.MaxTCP:
		// Its destination's share is held by handshakes that waited
		// SlowHandshake already: it does not answer, and this one would
		// only wait to be refused.
		f.forgetLocked(req.dst, d, now)
		f.mu.Unlock()
		return HalfOpen, false
	default:
		f.enqueueLocked(req)
	}
	if req.adm != admDone && !f.strictHalfOpen() {
		req.timer = time.AfterFunc(f.o.SlowHandshake, func() { f.slowHandshake(req) })
	}
	ready := req.ready
	f.mu.Unlock()
	if ready != nil {
		select {
		case <-ready:
		case <-f.ctx.Done():
			f.mu.Lock()
			if req.adm == admWaiting {
				f.dequeueLocked(req)
				req.adm, req.refused = admDone, Closing
			}
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.fl == nil {
		// Refused before it started; once started, it is the handler's
		// even if refused meanwhile (slowHandshake answered it).
		if req.timer != nil {
			req.timer.Stop()
		}
		f.forgetLocked(req.dst, req.d, time.Now())
		return req.refused, false
	}
	return 0, true
}

// dstLocked returns dst's state, making it if need be.
func (f *Forwarder) dstLocked(dst netip.AddrPort, now time.Time) *dstState {
	a := &f.adm
	if d := a.dsts[dst]; d != nil {
		return d
	}
	if len(a.dsts) >= maxDestinations {
		// Forget the idle destinations: those no longer known to answer
		// first, then others, down to half the bound.
		for k, d := range a.dsts {
			if d.idle() && !d.remembered(now) {
				delete(a.dsts, k)
			}
		}
		for k, d := range a.dsts {
			if len(a.dsts) < maxDestinations/2 {
				break
			}
			if d.idle() {
				delete(a.dsts, k)
			}
		}
	}
	d := &dstState{running: map[*TCPRequest]struct{}{}}
	a.dsts[dst] = d
	return d
}

// forgetLocked drops dst's state if it holds nothing worth keeping.
func (f *Forwarder) forgetLocked(dst netip.AddrPort, d *dstState, now time.Time) {
	if d.idle() && !d.remembered(now) {
		delete(f.adm.dsts, dst)
	}
}

// roomLocked reports whether req may be counted: the pool, its peer's
// share and its destination's have room.
func (f *Forwarder) roomLocked(req *TCPRequest) bool {
	a := &f.adm
	return a.counted < f.o.MaxHalfOpen && a.srcs[req.src.Addr()] < f.srcShare() && req.d.counted < f.dstShare()
}

func (f *Forwarder) countLocked(req *TCPRequest, n int) {
	a := &f.adm
	a.counted += n
	a.srcs[req.src.Addr()] += n
	if a.srcs[req.src.Addr()] <= 0 {
		delete(a.srcs, req.src.Addr())
	}
	req.d.counted += n
	f.c.halfOpen.Store(int64(a.counted))
}

// startLocked hands req to its handler: it reserves req's flow against the
// limits and the budget (or refuses req, done), and counts it if counted.
// A waiting req's handleTCP is woken.
func (f *Forwarder) startLocked(req *TCPRequest, counted bool) {
	if req.adm == admWaiting {
		f.dequeueLocked(req)
		defer close(req.ready)
	}
	fl, reason, ok := f.openLocked(TCP, req.src, req.dst)
	if !ok {
		req.adm, req.refused = admDone, reason
		return
	}
	req.fl = fl
	req.adm = admFree
	if counted {
		req.adm = admCounted
		f.countLocked(req, 1)
	} else {
		req.d.free++
	}
	req.d.running[req] = struct{}{}
	f.adm.running++
	f.c.handshakes.Store(int64(f.adm.running))
}

func (f *Forwarder) enqueueLocked(req *TCPRequest) {
	a := &f.adm
	req.adm = admWaiting
	req.ready = make(chan struct{})
	req.prev, req.next = a.tail, nil
	if a.tail != nil {
		a.tail.next = req
	} else {
		a.head = req
	}
	a.tail = req
	a.waiting++
	req.d.waiting++
	f.c.waiting.Store(int64(a.waiting))
}

func (f *Forwarder) dequeueLocked(req *TCPRequest) {
	a := &f.adm
	if req.prev != nil {
		req.prev.next = req.next
	} else {
		a.head = req.next
	}
	if req.next != nil {
		req.next.prev = req.prev
	} else {
		a.tail = req.prev
	}
	req.prev, req.next = nil, nil
	a.waiting--
	req.d.waiting--
	f.c.waiting.Store(int64(a.waiting))
}

// pumpLocked starts the waiting handshakes that may start now, oldest
// first.
func (f *Forwarder) pumpLocked(now time.Time) {
	for req := f.adm.head; req != nil; {
		next := req.next
		switch {
		case req.d.trusted(now):
			f.startLocked(req, false)
		case f.roomLocked(req):
			f.startLocked(req, true)
		}
		req = next
	}
}

// slowHandshake runs SlowHandshake after req's SYN, in a timer's
// goroutine: a waiting req is refused; a free one is counted, and refused
// if there is no room; either way its destination loses its trust.
func (f *Forwarder) slowHandshake(req *TCPRequest) {
	// A goroutine of the Forwarder's while it runs, so that Close waits
	// for it; after Close there is nothing left to do.
	if !f.own() {
		return
	}
	defer f.wg.Done()
	f.mu.Lock()
	now := time.Now()
	d := req.d
	switch req.adm {
	case admWaiting:
		f.dequeueLocked(req)
		req.adm, req.refused = admDone, HalfOpen
		close(req.ready)
		f.forgetLocked(req.dst, d, now)
		f.mu.Unlock()
		return
	case admFree:
		d.slow, d.trust = now, 0
		if f.roomLocked(req) {
			req.adm = admCounted
			d.free--
			f.countLocked(req, 1)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		// Refused late: the handler's dial is cancelled, and the peer
		// gets a reset.
		req.reject(HalfOpen, true)
		req.cancel()
		return
	case admCounted:
		d.slow, d.trust = now, 0
	}
	f.mu.Unlock()
}

// finishHandshake ends req's admission once it is answered: its count is
// released, and an answer within SlowHandshake earns its destination
// trust, which frees as many of the destination's counted handshakes;
// waiting ones that may start now do.
func (f *Forwarder) finishHandshake(req *TCPRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.timer != nil {
		req.timer.Stop()
	}
	if req.adm != admFree && req.adm != admCounted {
		return
	}
	now := time.Now()
	d := req.d
	released := req.adm == admCounted
	if released {
		f.countLocked(req, -1)
	} else {
		d.free--
	}
	req.adm = admDone
	delete(d.running, req)
	f.adm.running--
	f.c.handshakes.Store(int64(f.adm.running))
	if !f.strictHalfOpen() && now.Sub(req.arrived) < f.o.SlowHandshake {
		d.answered = now
		d.trust = min(d.trust+trustPerAnswer, f.o.MaxTCP)
		for other := range d.running {
			if !d.trusted(now) {
				break
			}
			if other.adm == admCounted {
				other.adm = admFree
				d.free++
				f.countLocked(other, -1)
				released = true
			}
		}
	}
	if released || d.waiting > 0 {
		f.pumpLocked(now)
	}
	f.forgetLocked(req.dst, d, now)
}
