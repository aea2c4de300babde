package stack

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// tcpListener is the stack's TCP listener: its Accept waits as the conns'
// reads do, on the sock's read deadline (SetDeadline, as
// *net.TCPListener has), and its conns are tcpConns.
type tcpListener struct {
	sock
	p      *poll.Poller // the accepted conns'
	cached bool
	addr   net.Addr
}

func newTCPListener(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller, cached bool) *tcpListener {
	l := &tcpListener{p: p, cached: cached}
	l.init("tcp", ep, wq, nil, cached)
	if a, err := ep.GetLocalAddress(); err == nil {
		l.addr = &net.TCPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
	}
	return l
}

// Accept implements net.Listener. It waits for a connection until the
// listener's deadline (SetDeadline) or Close.
func (l *tcpListener) Accept() (net.Conn, error) {
	if err := l.check(&l.rd); err != nil {
		return nil, l.acceptError(err)
	}
	var w waitReg
	defer l.unregister(&w)
	for {
		ep, wq, terr := l.ep.Accept(nil)
		switch terr.(type) {
		case nil:
			return newTCPConn(wq, ep, l.p, l.cached), nil
		case *tcpip.ErrWouldBlock:
		default:
			return nil, l.acceptError(l.fail(terr))
		}
		if err := l.wait(&w, &l.rwait, waiter.ReadableEvents, &l.rd); err != nil {
			return nil, l.acceptError(err)
		}
	}
}

func (l *tcpListener) acceptError(err error) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: err}
}

// Close implements net.Listener: it stops listening and wakes Accept.
func (l *tcpListener) Close() error {
	l.close()
	return nil
}

// Addr implements net.Listener.
func (l *tcpListener) Addr() net.Addr {
	if l.addr == nil {
		return &net.TCPAddr{}
	}
	return l.addr
}
