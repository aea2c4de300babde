package linkutil

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Lifecycle is the attach and close bookkeeping every ustack endpoint
// shares: the dispatcher, read without a lock on every delivery; whether
// the receive goroutines were started; and the on-close action gVisor
// registers. Embed it in an endpoint; it is safe for concurrent use.
//
// Two rules of gVisor shape it. Attach(nil) and Wait are called holding
// the stack's lock, which a delivery in progress may be waiting for, so
// neither may wait for the receive goroutines: Close joins them, and
// gVisor's Stack.Wait calls Close right after releasing its lock. And the
// on-close action removes the NIC, which closes the endpoint again, so
// Close must tolerate being re-entered.
type Lifecycle struct {
	dispatcher atomic.Pointer[dispatcherRef]

	mu      sync.Mutex // guards the fields below
	started bool
	closed  bool
	onClose func()
}

// dispatcherRef boxes an interface so it can live in an atomic.Pointer.
type dispatcherRef struct{ d stack.NetworkDispatcher }

// Dispatcher returns the attached dispatcher, or nil when detached.
func (l *Lifecycle) Dispatcher() stack.NetworkDispatcher {
	if r := l.dispatcher.Load(); r != nil {
		return r.d
	}
	return nil
}

// IsAttached implements stack.LinkEndpoint.
func (l *Lifecycle) IsAttached() bool { return l.dispatcher.Load() != nil }

// AttachAndStart stores d (nil detaches, at once, without waiting). The
// first non-nil d before Close calls start, with the lifecycle's lock held,
// to start the receive goroutines.
func (l *Lifecycle) AttachAndStart(d stack.NetworkDispatcher, start func()) {
	if d == nil {
		l.dispatcher.Store(nil)
		return
	}
	l.dispatcher.Store(&dispatcherRef{d: d})
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started && !l.closed {
		l.started = true
		start()
	}
}

// Wait implements stack.LinkEndpoint. It returns at once: gVisor calls it
// holding the stack's lock, and a receive goroutine may be blocked on that
// lock inside a delivery (an ICMP reply or a SYN-ACK looks up a route).
// Close stops and joins the goroutines; gVisor's Stack.Wait calls Close
// right after releasing its lock, so Stack.Destroy still returns with them
// gone.
func (*Lifecycle) Wait() {}

// SetOnCloseAction implements stack.LinkEndpoint.
func (l *Lifecycle) SetOnCloseAction(f func()) {
	l.mu.Lock()
	l.onClose = f
	l.mu.Unlock()
}

// BeginClose starts closing: it marks the endpoint closed, runs the
// on-close action (which removes the NIC from its stack) and detaches the
// dispatcher. It returns first=false if Close had already begun, in which
// case the caller returns at once, and whether the receive goroutines were
// ever started.
func (l *Lifecycle) BeginClose() (first, started bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, l.started
	}
	l.closed = true
	action := l.onClose
	l.onClose = nil
	started = l.started
	l.mu.Unlock()
	if action != nil {
		action()
	}
	l.dispatcher.Store(nil)
	return true, started
}

// Closed reports whether Close has begun.
func (l *Lifecycle) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// IfOpen runs f with the lifecycle's lock held unless Close has begun, and
// reports whether it ran. An endpoint starts goroutines on demand through
// it, so that none starts after Close has begun waiting for them.
func (l *Lifecycle) IfOpen(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	f()
	return true
}
