package forward

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/stack"
)

// TCPRequest is a TCP connection a peer of the stack is opening, its
// handshake not yet completed. Answer it once, with Accept or Reject.
type TCPRequest struct {
	f        *Forwarder
	r        *tcp.ForwarderRequest
	src, dst netip.AddrPort
	arrived  time.Time // when its SYN came
	ctx      context.Context
	cancel   context.CancelFunc

	// Admission (handshake.go), guarded by f.mu.
	fl         *flow // once admitted
	d          *dstState
	adm        admState
	refused    Reason        // why, if refused before it started
	ready      chan struct{} // closed when a waiting request starts or is refused
	timer      *time.Timer   // SlowHandshake after arrived
	prev, next *TCPRequest   // in the waiting queue

	mu       sync.Mutex
	answered bool
}

// Src is the peer's address and port.
func (r *TCPRequest) Src() netip.AddrPort { return r.src }

// Dst is the address and port the peer is connecting to (the original
// destination).
func (r *TCPRequest) Dst() netip.AddrPort { return r.dst }

// Context is cancelled when the Forwarder closes, or when the request is
// refused meanwhile (a handshake that waited longer than
// Options.SlowHandshake and found no room under the half-open limits):
// dial upstream with it.
func (r *TCPRequest) Context() context.Context { return r.ctx }

// answer marks the request answered and ends its admission, or reports
// that it already was.
func (r *TCPRequest) answer() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return false
	}
	r.answered = true
	r.f.finishHandshake(r)
	return true
}

// Accept completes the handshake and returns the connection (Up is what
// Read returns). It fails if the request was answered already or the peer
// gave up meanwhile.
func (r *TCPRequest) Accept() (stack.TCPConn, error) {
	if !r.answer() {
		return nil, fmt.Errorf("forward: accept %v -> %v: request already answered", r.src, r.dst)
	}
	wq := new(waiter.Queue)
	ep, terr := r.r.CreateEndpoint(wq)
	r.r.Complete(false)
	if terr != nil {
		r.fl.release()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Source: net.TCPAddrFromAddrPort(r.dst), Addr: net.TCPAddrFromAddrPort(r.src), Err: stack.TranslateError(terr)}
	}
	return r.f.newConn(wq, ep, r.fl), nil
}

// Reject refuses the connection: with reset the peer gets a RST (its
// connect fails with ECONNREFUSED), without it the SYN is dropped and the
// peer retries until it gives up. Counted as Rejected. Rejecting an
// answered request does nothing.
func (r *TCPRequest) Reject(reset bool) { r.reject(Rejected, reset) }

// reject refuses with a reason; a negative reason is not a refusal (the
// upstream connect failed).
func (r *TCPRequest) reject(reason Reason, reset bool) {
	if !r.answer() {
		return
	}
	if reason >= 0 {
		r.f.refuse(reason)
	}
	r.r.Complete(reset)
	r.fl.release()
}

// DialTCP connects from the stack to dst, a peer behind its NICs (a port
// forward into a namespace, say), as a flow counted against the limits
// and the budget like any other, through the stack's own dial
// (stack.ConnectTCP). Its Up is what Read returns. The dial ends when ctx
// does or the Forwarder closes. Errors are *net.OpError: a refusal of the
// Forwarder's own carries a *RefusedError, any other the errno (a reset
// from dst is syscall.ECONNREFUSED).
func (f *Forwarder) DialTCP(ctx context.Context, dst netip.AddrPort) (stack.TCPConn, error) {
	fl, reason, ok := f.open(TCP, netip.AddrPort{}, dst)
	if !ok {
		f.refuse(reason)
		return nil, refusedError("tcp", dst, reason)
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel)
	defer stop()
	wq, ep, err := f.st.ConnectTCP(dctx, dst)
	if err != nil {
		fl.release()
		if ctx.Err() == nil && f.ctx.Err() != nil {
			return nil, refusedError("tcp", dst, Closing)
		}
		return nil, err
	}
	if la, err := ep.GetLocalAddress(); err == nil {
		fl.setSrc(netip.AddrPortFrom(addrOf(la.Addr), la.Port))
	}
	return f.newConn(wq, ep, fl), nil
}

// conn is a TCP flow's net.Conn: the stack's conn, counting bytes into
// the flow, owning the flow's reservation until Close. The stack's conn
// is made on first use: a flow relayed to a host socket uses the endpoint
// directly and never needs it, so an idle one does not hold it.
type conn struct {
	ep tcpip.Endpoint
	wq *waiter.Queue
	fl *flow

	once sync.Once
	nc   stack.TCPConn // the stack's conn, once made
}

var _ stack.TCPConn = (*conn)(nil)

func (f *Forwarder) newConn(wq *waiter.Queue, ep tcpip.Endpoint, fl *flow) *conn {
	if b := f.o.TCPBuffer; b > 0 {
		so := ep.SocketOptions()
		if int64(b) < so.GetSendBufferSize() {
			so.SetSendBufferSize(int64(b), true)
		}
		if int64(b) < so.GetReceiveBufferSize() {
			so.SetReceiveBufferSize(int64(b), true)
		}
	}
	f.c.tcpOpened.Add(1)
	c := &conn{ep: ep, wq: wq, fl: fl}
	fl.setAbort(ep, ep.Abort)
	return c
}

// stackConn is the stack's conn over the endpoint, made the first time
// it is asked for.
func (c *conn) stackConn() stack.TCPConn {
	c.once.Do(func() { c.nc = c.fl.f.st.NewTCPConn(c.wq, c.ep) })
	return c.nc
}

// Read implements net.Conn.
func (c *conn) Read(b []byte) (int, error) {
	n, err := c.stackConn().Read(b)
	c.countUp(n)
	return n, err
}

// Write implements net.Conn.
func (c *conn) Write(b []byte) (int, error) {
	n, err := c.stackConn().Write(b)
	c.countDown(n)
	return n, err
}

func (c *conn) countUp(n int) {
	if n > 0 {
		c.fl.rx.Add(uint64(n))
		c.fl.f.c.tcpUp.Add(uint64(n))
	}
}

func (c *conn) countDown(n int) {
	if n > 0 {
		c.fl.tx.Add(uint64(n))
		c.fl.f.c.tcpDown.Add(uint64(n))
	}
}

// CloseRead shuts the reading side down.
func (c *conn) CloseRead() error {
	return c.stackConn().CloseRead()
}

// CloseWrite sends FIN after what was written.
func (c *conn) CloseWrite() error {
	return c.stackConn().CloseWrite()
}

// Close implements net.Conn and ends the flow.
func (c *conn) Close() error {
	// A conn never used is made here: the garbage of a flow that ends,
	// where an idle one holds nothing, and Read and Write after Close
	// fail as the stack's conn does.
	err := c.stackConn().Close()
	c.fl.release()
	return err
}

// LocalAddr implements net.Conn.
func (c *conn) LocalAddr() net.Addr { return c.stackConn().LocalAddr() }

// RemoteAddr implements net.Conn.
func (c *conn) RemoteAddr() net.Addr { return c.stackConn().RemoteAddr() }

// SetDeadline implements net.Conn.
func (c *conn) SetDeadline(t time.Time) error { return c.stackConn().SetDeadline(t) }

// SetReadDeadline implements net.Conn.
func (c *conn) SetReadDeadline(t time.Time) error { return c.stackConn().SetReadDeadline(t) }

// SetWriteDeadline implements net.Conn.
func (c *conn) SetWriteDeadline(t time.Time) error { return c.stackConn().SetWriteDeadline(t) }
