package linkutil

import (
	"sync"
	"sync/atomic"
)

// PollGate is the busy polling bookkeeping of one receive queue whose
// goroutine parks in the kernel or the netpoller (AF_PACKET, TUN): who
// may receive now, and when the queue's own goroutine must stand aside
// for busy-polling readers (package poll). The zero value is ready; it is
// safe for concurrent use.
//
// Whoever receives a round (a syscall and its delivery) holds Owner, so
// rounds never overlap and packets keep their order. While readers poll,
// the receive goroutine does not receive: when the netpoller wakes it, it
// finds Deferring true and waits on Rearmed instead, which the last
// reader to stop, or the watchdog, signals. So it wakes at most once per
// polling spell rather than once per packet.
type PollGate struct {
	Owner sync.Mutex

	polling atomic.Int32
	forced  atomic.Bool
	once    sync.Once
	rearm   chan struct{}
	polled  atomic.Uint64
}

func (g *PollGate) ch() chan struct{} {
	g.once.Do(func() { g.rearm = make(chan struct{}, 1) })
	return g.rearm
}

// Begin counts a reader that starts polling the queue.
func (g *PollGate) Begin() { g.polling.Add(1) }

// End counts a reader that stops; the last one re-arms the receive
// goroutine.
func (g *PollGate) End() {
	if g.polling.Add(-1) == 0 {
		g.kick()
	}
}

// Watchdog lets the receive goroutine run a round although readers claim
// to poll, and reports whether any did claim to.
func (g *PollGate) Watchdog() bool {
	if g.polling.Load() == 0 {
		return false
	}
	g.forced.Store(true)
	g.kick()
	return true
}

// Force lets the receive goroutine run its next round whatever the
// readers do: a busy-polling reader calls it when a receive failed in a
// way only the receive goroutine handles (device down or gone).
func (g *PollGate) Force() {
	g.forced.Store(true)
	g.kick()
}

func (g *PollGate) kick() {
	select {
	case g.ch() <- struct{}{}:
	default:
	}
}

// Deferring reports whether the receive goroutine should leave the queue
// to busy-polling readers now.
func (g *PollGate) Deferring() bool { return g.polling.Load() > 0 && !g.forced.Load() }

// Rearmed is what the receive goroutine waits on while Deferring.
func (g *PollGate) Rearmed() <-chan struct{} { return g.ch() }

// Received tells the gate that the receive goroutine ran a round, which
// ends a forced one.
func (g *PollGate) Received() {
	if g.forced.Load() { // a load, not a store, on every round
		g.forced.Store(false)
	}
}

// CountPolled counts a round a busy-polling reader ran.
func (g *PollGate) CountPolled() { g.polled.Add(1) }

// Polled returns how many rounds busy-polling readers ran.
func (g *PollGate) Polled() uint64 { return g.polled.Load() }

// PollGates are the gates of an endpoint's queues: a busy-polling reader
// polls them all, so it begins, ends and is watched over on each.
type PollGates []*PollGate

// Begin counts a reader starting to poll every queue.
func (gs PollGates) Begin() {
	for _, g := range gs {
		g.Begin()
	}
}

// End counts a reader that stops polling every queue.
func (gs PollGates) End() {
	for _, g := range gs {
		g.End()
	}
}

// Watchdog calls Watchdog on every gate and reports whether any still has
// readers claiming to poll.
func (gs PollGates) Watchdog() bool {
	polling := false
	for _, g := range gs {
		polling = g.Watchdog() || polling
	}
	return polling
}

// WaitTurn is the receive goroutine's side of the gate: it blocks while
// the queue is deferred to busy-polling readers, and returns false if stop
// is closed first.
func (g *PollGate) WaitTurn(stop <-chan struct{}) bool {
	for g.Deferring() {
		select {
		case <-g.Rearmed():
		case <-stop:
			return false
		}
	}
	return true
}
