package stack

import (
	"io"
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// tcpConn is the stack's TCP conn (TCPConn) over a connected endpoint:
// what DialTCP, NewTCPConn and the listeners hand out.
type tcpConn struct {
	sock
}

func newTCPConn(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller, cached bool) *tcpConn {
	c := &tcpConn{}
	c.init("tcp", ep, wq, p, cached)
	return c
}

func (c *tcpConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Read implements net.Conn. A read of nothing returns at once, as Go's
// sockets do.
func (c *tcpConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		if err := c.check(&c.rd); err != nil {
			return 0, c.opError("read", err)
		}
		return 0, nil
	}
	res, err := c.read(b, tcpip.ReadOptions{})
	switch {
	case err == io.EOF:
		return 0, io.EOF
	case err != nil:
		return 0, c.opError("read", err)
	}
	c.ep.ModerateRecvBuf(res.Count)
	return res.Count, nil
}

// Write implements net.Conn.
func (c *tcpConn) Write(b []byte) (int, error) {
	n, err := c.write(b, nil, true)
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// CloseRead implements TCPConn: reads return io.EOF from here on.
func (c *tcpConn) CloseRead() error {
	if terr := c.ep.Shutdown(tcpip.ShutdownRead); terr != nil {
		return c.opError("close", c.fail(terr))
	}
	return nil
}

// CloseWrite implements TCPConn: the peer reads EOF after what was
// written.
func (c *tcpConn) CloseWrite() error {
	if terr := c.ep.Shutdown(tcpip.ShutdownWrite); terr != nil {
		return c.opError("close", c.fail(terr))
	}
	return nil
}

// Close implements net.Conn: it aborts reads and writes in progress,
// with net.ErrClosed, and closes the endpoint.
func (c *tcpConn) Close() error {
	c.close()
	return nil
}

// LocalAddr implements net.Conn; nil once the endpoint has none.
func (c *tcpConn) LocalAddr() net.Addr {
	a, terr := c.ep.GetLocalAddress()
	if terr != nil {
		return nil
	}
	return &net.TCPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
}

// RemoteAddr implements net.Conn; nil once the endpoint has none.
func (c *tcpConn) RemoteAddr() net.Addr {
	a, terr := c.ep.GetRemoteAddress()
	if terr != nil {
		return nil
	}
	return &net.TCPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
}
