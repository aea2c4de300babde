package stack

import (
	"net"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// The conns below are what the stack hands out when busy polling is on:
// gonet's conns with a Read that, finding nothing to read, busy polls the
// stack's links (poll.Poller.Wait) before gonet parks it. With busy
// polling off the stack hands out gonet's conns unchanged.

// readGate is the busy-polling part shared by the TCP and UDP conns.
type readGate struct {
	ep     tcpip.Endpoint
	p      *poll.Poller
	closed atomic.Bool
	ready  func() bool // c.readable, bound once so a wait allocates nothing
}

func (g *readGate) init(ep tcpip.Endpoint, p *poll.Poller) {
	g.ep, g.p = ep, p
	g.ready = g.readable
}

// readable reports whether a read would not block: data, EOF or an error
// is waiting, or the conn was closed (so Close interrupts a spin).
func (g *readGate) readable() bool {
	return g.closed.Load() || g.ep.Readiness(waiter.ReadableEvents) != 0
}

// wait busy polls if a read of want bytes would block.
func (g *readGate) wait(want int) {
	if want > 0 && !g.readable() {
		g.p.Wait(g.ready)
	}
}

// pollTCPConn is a gonet TCP conn whose reads busy poll. CloseWrite and
// CloseRead come from gonet.
type pollTCPConn struct {
	*gonet.TCPConn
	gate readGate
}

func newPollTCPConn(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller) *pollTCPConn {
	c := &pollTCPConn{TCPConn: gonet.NewTCPConn(wq, ep)}
	c.gate.init(ep, p)
	return c
}

// Read implements net.Conn.
func (c *pollTCPConn) Read(b []byte) (int, error) {
	c.gate.wait(len(b))
	return c.TCPConn.Read(b)
}

// Close implements net.Conn; it also ends a busy poll in progress.
func (c *pollTCPConn) Close() error {
	c.gate.closed.Store(true)
	return c.TCPConn.Close()
}

// pollUDPConn is a UDP conn whose reads busy poll.
type pollUDPConn struct {
	udpConn
	gate readGate
}

func newPollUDPConn(c udpConn, ep tcpip.Endpoint, p *poll.Poller) *pollUDPConn {
	u := &pollUDPConn{udpConn: c}
	u.gate.init(ep, p)
	return u
}

// Read implements net.Conn.
func (c *pollUDPConn) Read(b []byte) (int, error) {
	c.gate.wait(1) // a datagram may be empty, so even len(b) == 0 reads one
	return c.udpConn.Read(b)
}

// ReadFrom implements net.PacketConn.
func (c *pollUDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	c.gate.wait(1)
	return c.udpConn.ReadFrom(b)
}

// Close implements net.Conn; it also ends a busy poll in progress.
func (c *pollUDPConn) Close() error {
	c.gate.closed.Store(true)
	return c.udpConn.Close()
}

// pollTCPListener is a TCP listener whose accepted conns busy poll. gonet's
// listener hides the accepted endpoints, which a busy-polling conn needs
// for its readiness, so this one accepts itself.
type pollTCPListener struct {
	ep   tcpip.Endpoint
	wq   *waiter.Queue
	p    *poll.Poller
	addr net.Addr

	closeOnce sync.Once
	done      chan struct{}
}

func newPollTCPListener(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller) *pollTCPListener {
	l := &pollTCPListener{ep: ep, wq: wq, p: p, done: make(chan struct{})}
	if a, err := ep.GetLocalAddress(); err == nil {
		l.addr = &net.TCPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
	}
	return l
}

// Accept implements net.Listener.
func (l *pollTCPListener) Accept() (net.Conn, error) {
	n, wq, terr := l.ep.Accept(nil)
	if _, block := terr.(*tcpip.ErrWouldBlock); block {
		entry, ready := waiter.NewChannelEntry(waiter.ReadableEvents)
		l.wq.EventRegister(&entry)
		defer l.wq.EventUnregister(&entry)
		for {
			n, wq, terr = l.ep.Accept(nil)
			if _, block := terr.(*tcpip.ErrWouldBlock); !block {
				break
			}
			select {
			case <-ready:
			case <-l.done:
				return nil, l.acceptError(net.ErrClosed)
			}
		}
	}
	if terr != nil {
		select {
		case <-l.done:
			return nil, l.acceptError(net.ErrClosed)
		default:
		}
		return nil, l.acceptError(netError(terr))
	}
	return newPollTCPConn(wq, n, l.p), nil
}

func (l *pollTCPListener) acceptError(err error) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: err}
}

// Close implements net.Listener: it stops listening and wakes Accept.
func (l *pollTCPListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.ep.Close()
	})
	return nil
}

// Addr implements net.Listener.
func (l *pollTCPListener) Addr() net.Addr {
	if l.addr == nil {
		return &net.TCPAddr{}
	}
	return l.addr
}
