package stack

import (
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// tcpListener is a TCP listener whose accepted conns are tcpConns. gonet's
// listener hides the accepted endpoints, which a busy-polling or cached
// conn needs, so this one accepts itself.
type tcpListener struct {
	ep     tcpip.Endpoint
	wq     *waiter.Queue
	p      *poll.Poller
	cached bool
	addr   net.Addr

	closeOnce sync.Once
	done      chan struct{}
}

func newTCPListener(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller, cached bool) *tcpListener {
	l := &tcpListener{ep: ep, wq: wq, p: p, cached: cached, done: make(chan struct{})}
	if a, err := ep.GetLocalAddress(); err == nil {
		l.addr = &net.TCPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
	}
	return l
}

// Accept implements net.Listener.
func (l *tcpListener) Accept() (net.Conn, error) {
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
		return nil, l.acceptError(TranslateError(terr))
	}
	return newTCPConn(wq, n, l.p, l.cached), nil
}

func (l *tcpListener) acceptError(err error) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: err}
}

// Close implements net.Listener: it stops listening and wakes Accept.
func (l *tcpListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.ep.Close()
	})
	return nil
}

// Addr implements net.Listener.
func (l *tcpListener) Addr() net.Addr {
	if l.addr == nil {
		return &net.TCPAddr{}
	}
	return l.addr
}
