package forward

import (
	"net"
	"sync"
	"syscall"

	"gvisor.dev/gvisor/pkg/waiter"
)

// hostPump carries one TCP flow between a gVisor endpoint and a host
// socket, each byte copied once per direction: gVisor writes its receive
// buffer's views straight into the host socket (hostWriter) and reads the
// host socket straight into its send buffer (hostReader).
//
// A direction holds a goroutine (a runner) only while it has something to
// do. Idle, it is parked: the peer-to-host direction on a callback in the
// endpoint's waiter queue, which gVisor calls in its own goroutines when
// data arrives, the host-to-peer one in the Forwarder's hostPoller. A
// wake-up starts a runner, which copies while data is ready and parks
// again; so an idle flow holds neither goroutine nor buffer. A runner
// blocked on a full buffer on the far side waits in place (the flow is
// busy, not idle), and one that ran out of data lingers hostLinger before
// parking (the host-to-peer one on the host socket, the peer-to-host one
// on upWake), so that an active flow is served by the same two
// goroutines, without a goroutine start or the poller's hand-off per
// message.
//
// The state of each direction (running, parked, ended) is guarded by mu,
// and only a transition from parked starts a runner, so a direction has
// one runner at most; abort ends parked directions itself and running
// ones through their runners, and whichever ends the last direction
// closes both sides (finish). This file holds those states and their
// transitions; hostpumpio_linux.go the runners and the host socket's I/O.
type hostPump struct {
	c    *conn
	host *net.TCPConn
	rc   syscall.RawConn
	hp   *hostPoller
	id   uint64        // in hp
	done chan struct{} // closed by abort: ends the waits of runners
	once sync.Once     // for abort

	// entry is the peer-to-host direction's wake-up, registered in the
	// endpoint's waiter queue for the pump's life.
	entry waiter.Entry
	// finished, if not nil, is closed once both sides are closed.
	finished chan struct{}
	// inPoller says that the host socket was added to hp's epoll set;
	// owned by the host-to-peer direction's runner.
	inPoller bool

	mu       sync.Mutex
	up, down dirState      // peer-to-host, host-to-peer
	upWake   chan struct{} // the up runner's wake-up, while there is one
	aborted  bool
	closed   bool // finish ran or is running
}

// dirState is where one direction of a hostPump is.
type dirState uint8

const (
	running dirState = iota // a goroutine owns the direction
	parked                  // waiting for a wake-up, without a goroutine
	ended                   // done for good
)

// upEvents wake the peer-to-host direction: data, the peer's FIN or
// reset.
const upEvents = waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr

// hostSplice relays between c and host: the calling goroutine is the
// first host-to-peer runner, so it returns once that direction parks (the
// host was silent for hostLinger) or ends, and the host's first answer
// takes no hand-off. The pump closes both sides once both directions have
// ended; with wait hostSplice returns a channel closed then. false means
// the host socket cannot be polled (nothing was done; copy instead).
func hostSplice(c *conn, host *net.TCPConn, wait bool) (<-chan struct{}, bool) {
	rc, err := host.SyscallConn()
	if err != nil {
		return nil, false
	}
	hp, err := c.fl.f.hostPoll()
	if err != nil {
		return nil, false
	}
	p := &hostPump{c: c, host: host, rc: rc, hp: hp, done: make(chan struct{})}
	if wait {
		p.finished = make(chan struct{})
	}
	// Both directions start as running, owned by this call, so that an
	// abort meanwhile leaves the finishing to the parks below.
	hp.add(p)
	c.fl.setAbort(c.ep, func() { p.abort(false) })
	p.entry = waiter.NewFunctionEntry(upEvents, func(waiter.EventMask) { p.wakeUp() })
	c.wq.EventRegister(&p.entry)
	if p.park(&p.up) && c.ep.Readiness(upEvents) != 0 {
		p.wakeUp() // the peer's first data came with the handshake
	}
	p.pumpDown()
	return p.finished, true
}

// wakeUp signals the peer-to-host runner or, if that direction is
// parked, starts one. It is called by gVisor with the waiter queue
// locked: it only schedules.
func (p *hostPump) wakeUp() {
	p.mu.Lock()
	if p.upWake != nil {
		// A runner: running (the token makes it read once more, as the
		// channel entry of a goroutine per direction did) or lingering.
		select {
		case p.upWake <- struct{}{}:
		default: // signalled already
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if p.claim(&p.up, true) {
		go p.upLoop()
	}
}

// wakeDown starts a host-to-peer runner if that direction is parked.
func (p *hostPump) wakeDown() {
	if p.claim(&p.down, true) {
		go p.downLoop()
	}
}

// claim makes a parked direction running, for a new goroutine (counted
// in the Forwarder's) or for the caller, a runner that just parked it.
func (p *hostPump) claim(d *dirState, spawn bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *d != parked || p.aborted {
		return false
	}
	*d = running
	if spawn {
		// Close aborts every flow before it waits, and an aborted pump
		// starts no runner, so this Add never races Close's Wait.
		p.c.fl.f.wg.Add(1)
	}
	return true
}

// park gives up a running direction until its next wake-up; false means
// the pump was aborted and the direction ended instead.
func (p *hostPump) park(d *dirState) bool {
	p.mu.Lock()
	if !p.aborted {
		*d = parked
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	p.end(d)
	return false
}

// end ends a running direction; the last one to end closes both sides.
func (p *hostPump) end(d *dirState) {
	p.mu.Lock()
	*d = ended
	last := p.lastLocked()
	p.mu.Unlock()
	if last {
		p.finish()
	}
}

// lastLocked reports, once, that both directions have ended.
func (p *hostPump) lastLocked() bool {
	if p.up != ended || p.down != ended || p.closed {
		return false
	}
	p.closed = true
	return true
}

// finish releases both sides once both directions have ended.
func (p *hostPump) finish() {
	p.c.wq.EventUnregister(&p.entry)
	p.hp.remove(p)
	p.host.Close()
	// What c.Close does, without making the stack's conn the pump never
	// used (it would be garbage at once).
	p.c.ep.Close()
	p.c.fl.release()
	if p.finished != nil {
		close(p.finished)
	}
}

// abort ends both directions at once; with reset the peers see resets
// (a reset from one side is carried to the other).
func (p *hostPump) abort(reset bool) {
	p.once.Do(func() {
		p.mu.Lock()
		p.aborted = true // no runner starts from here on
		p.mu.Unlock()
		if reset {
			p.c.fl.f.c.tcpResets.Add(1)
		}
		p.host.SetLinger(0)
		p.c.ep.Abort()
		close(p.done)
		// Closing wakes a runner waiting on the host socket.
		p.host.Close()
		// Parked directions have no runner to end them.
		p.mu.Lock()
		if p.up == parked {
			p.up = ended
		}
		if p.down == parked {
			p.down = ended
		}
		last := p.lastLocked()
		p.mu.Unlock()
		if last {
			p.finish()
		}
	})
}

// setUpWake makes wake the up runner's wake-up; nil when it parks.
func (p *hostPump) setUpWake(wake chan struct{}) {
	p.mu.Lock()
	p.upWake = wake
	p.mu.Unlock()
}
