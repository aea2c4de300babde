package stack

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// tcpConn is a gonet TCP conn with busy-polling reads (gate, nil when off)
// and cached fast paths (io, nil when off). CloseWrite and CloseRead come
// from gonet.
type tcpConn struct {
	*gonet.TCPConn
	ep   tcpip.Endpoint
	wq   *waiter.Queue
	gate *readGate
	io   *connIO
}

func newTCPConn(wq *waiter.Queue, ep tcpip.Endpoint, p *poll.Poller, cached bool) *tcpConn {
	return &tcpConn{TCPConn: gonet.NewTCPConn(wq, ep), ep: ep, wq: wq, gate: newReadGate(ep, p), io: newConnIO(cached)}
}

// Read implements net.Conn.
func (c *tcpConn) Read(b []byte) (int, error) {
	c.gate.wait(len(b))
	if len(b) > 0 {
		res, err, handled := c.io.readWait(c.ep, c.wq, b, tcpip.ReadOptions{})
		switch {
		case handled && err != nil:
			return 0, connError("read", "tcp", err, c.LocalAddr(), c.RemoteAddr())
		case handled && res.Count > 0:
			c.ep.ModerateRecvBuf(res.Count)
			return res.Count, nil
		}
	}
	return gonetN(c.TCPConn.Read(b))
}

// Write implements net.Conn.
func (c *tcpConn) Write(b []byte) (int, error) {
	n, err, done := c.io.write(c.ep, b, nil)
	switch {
	case done && err != nil:
		return n, connError("write", "tcp", err, c.LocalAddr(), c.RemoteAddr())
	case done:
		return n, nil
	}
	m, gerr := c.TCPConn.Write(b[n:])
	return n + m, gonetError(gerr)
}

// SetDeadline implements net.Conn.
func (c *tcpConn) SetDeadline(t time.Time) error {
	c.io.setDeadlines(t, true, true)
	return c.TCPConn.SetDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *tcpConn) SetReadDeadline(t time.Time) error {
	c.io.setDeadlines(t, true, false)
	return c.TCPConn.SetReadDeadline(t)
}

// SetWriteDeadline implements net.Conn.
func (c *tcpConn) SetWriteDeadline(t time.Time) error {
	c.io.setDeadlines(t, false, true)
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *tcpConn) Close() error {
	c.gate.close()
	err := c.TCPConn.Close()
	c.io.wake()
	return err
}
