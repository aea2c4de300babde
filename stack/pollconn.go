package stack

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// The conns below are what the stack hands out when busy polling or the
// buffer cache is on: gonet's conns with a Read that, finding nothing to
// read, busy polls the stack's links (poll.Poller.Wait) before gonet
// parks it, and, with the cache on, Read and Write fast paths that use
// the conn's own scratch (connIO) where gonet allocates per call. With
// both off the stack hands out gonet's conns unchanged.

// readGate is the busy-polling part shared by the TCP and UDP conns.
type readGate struct {
	ep     tcpip.Endpoint
	p      *poll.Poller
	closed atomic.Bool
	ready  func() bool // c.readable, bound once so a wait allocates nothing
}

func newReadGate(ep tcpip.Endpoint, p *poll.Poller) *readGate {
	if !p.Enabled() {
		return nil
	}
	g := &readGate{ep: ep, p: p}
	g.ready = g.readable
	return g
}

// readable reports whether a read would not block: data, EOF or an error
// is waiting, or the conn was closed (so Close interrupts a spin).
func (g *readGate) readable() bool {
	return g.closed.Load() || g.ep.Readiness(waiter.ReadableEvents) != 0
}

// wait busy polls if a read of want bytes would block. A nil gate (busy
// polling off) does nothing.
func (g *readGate) wait(want int) {
	if g != nil && want > 0 && !g.readable() {
		g.p.Wait(g.ready)
	}
}

// close ends a busy poll in progress.
func (g *readGate) close() {
	if g != nil {
		g.closed.Store(true)
	}
}

// connIO is a conn's own read and write scratch: what gonet allocates on
// every call (a slice writer for the endpoint to copy into, a reader over
// the caller's bytes, a destination address) kept for the conn's life, so
// that a read that finds data, or a write that finds room, allocates
// nothing in our layer. Each half is used by one call at a time (a
// TryLock; a concurrent call takes gonet's path) and reset after use, so
// it never keeps the caller's bytes. A call with a deadline set takes the
// fast path only while the deadline is in the future; waiting is always
// gonet's.
type connIO struct {
	rmu sync.Mutex
	w   tcpip.SliceWriter
	// entry and ready wait for readability in readWait; ready is also
	// poked when a read deadline is set, so a waiting read hands over to
	// gonet, which keeps the deadlines.
	entry waiter.Entry
	ready chan struct{}
	wmu   sync.Mutex
	r     bytes.Reader
	to    tcpip.FullAddress
	// Read and write deadlines in Unix nanoseconds; 0 is none.
	rdl, wdl atomic.Int64
}

// newConnIO returns the scratch for a new conn, or nil if caching is off.
func newConnIO(on bool) *connIO {
	if !on {
		return nil
	}
	c := &connIO{}
	c.entry, c.ready = waiter.NewChannelEntry(waiter.ReadableEvents)
	return c
}

// due reports whether a deadline d (Unix nanoseconds, 0 none) allows the
// fast path.
func due(d int64) bool { return d != 0 && time.Now().UnixNano() >= d }

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// readWait reads into b, waiting for data as gonet does but with the
// conn's own wait entry. handled is false when the caller must take
// gonet's path instead: a read deadline is set, or another read is in
// progress. Otherwise res and err are the endpoint's (err is never
// ErrWouldBlock), and the caller translates err as gonet would: the
// endpoint reports an error once, so it must not be read again.
func (c *connIO) readWait(ep tcpip.Endpoint, wq *waiter.Queue, b []byte, opts tcpip.ReadOptions) (res tcpip.ReadResult, err tcpip.Error, handled bool) {
	if c == nil || c.rdl.Load() != 0 || !c.rmu.TryLock() {
		return tcpip.ReadResult{}, nil, false
	}
	defer c.rmu.Unlock()
	registered := false
	defer func() {
		if registered {
			wq.EventUnregister(&c.entry)
		}
	}()
	for {
		c.w = b
		res, err = ep.Read(&c.w, opts)
		c.w = nil
		if _, block := err.(*tcpip.ErrWouldBlock); !block {
			return res, err, true
		}
		if c.rdl.Load() != 0 {
			return tcpip.ReadResult{}, nil, false
		}
		if !registered {
			// Register, then read again: data that arrived in between
			// is not waited for.
			wq.EventRegister(&c.entry)
			registered = true
			continue
		}
		<-c.ready
	}
}

// wake wakes a readWait in progress, if c is not nil: after Close, which
// gVisor also signals, so that the wait never depends on that alone.
func (c *connIO) wake() {
	if c != nil {
		c.poke()
	}
}

// poke wakes a readWait in progress.
func (c *connIO) poke() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// write tries one non-blocking write of b (to *to, if not nil). It
// returns how much the endpoint took, and done: false when the caller is
// to write b[n:] through gonet, which waits (the write was not tried, the
// endpoint would block, or it took only part); true with err nil when all
// of b went, or with the endpoint's error (reported once, so the caller
// translates it rather than retry).
func (c *connIO) write(ep tcpip.Endpoint, b []byte, to *tcpip.FullAddress) (n int, err tcpip.Error, done bool) {
	if c == nil || len(b) == 0 || due(c.wdl.Load()) || !c.wmu.TryLock() {
		return 0, nil, false
	}
	c.r.Reset(b)
	opts := tcpip.WriteOptions{}
	if to != nil {
		c.to = *to
		opts.To = &c.to
	}
	m, err := ep.Write(&c.r, opts)
	c.r.Reset(nil)
	c.to = tcpip.FullAddress{}
	c.wmu.Unlock()
	switch err.(type) {
	case nil:
		return int(m), nil, int(m) == len(b)
	case *tcpip.ErrWouldBlock:
		return int(m), nil, false
	}
	return int(m), err, true
}

// connError builds the error gonet would for a failed call, translated
// as netError does: io.EOF for a read after the peer closed, otherwise a
// *net.OpError with its local address as the source and remote as the
// address.
func connError(op, network string, err tcpip.Error, local, remote net.Addr) error {
	if _, eof := err.(*tcpip.ErrClosedForReceive); eof && op == "read" {
		return io.EOF
	}
	return &net.OpError{Op: op, Net: network, Source: local, Addr: remote, Err: netError(err)}
}

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

func (c *connIO) setDeadlines(t time.Time, read, write bool) {
	if c == nil {
		return
	}
	if read {
		c.rdl.Store(deadlineNanos(t))
		c.poke()
	}
	if write {
		c.wdl.Store(deadlineNanos(t))
	}
}

// Close implements net.Conn; it also ends a busy poll in progress.
func (c *tcpConn) Close() error {
	c.gate.close()
	err := c.TCPConn.Close()
	c.io.wake()
	return err
}

// udpSocket is a UDP socket with any of: IP_RECVERR drained (recvErr),
// busy-polling reads (gate), cached fast paths (io).
//
// With IP_RECVERR, gVisor queues every ICMP error the socket receives,
// with a copy of the offending datagram, on an error queue that gonet
// cannot read and that gVisor neither bounds nor releases at Close. The
// socket empties that queue, releasing each copy, before each write and at
// Close, so it neither grows nor leaks.
type udpSocket struct {
	*gonet.UDPConn
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	recvErr bool
	gate    *readGate
	io      *connIO
}

func (c *udpSocket) drainErrors() {
	if !c.recvErr {
		return
	}
	so := c.ep.SocketOptions()
	for e := so.DequeueErr(); e != nil; e = so.DequeueErr() {
		if e.Payload != nil {
			e.Payload.Release()
		}
	}
}

// Read implements net.Conn.
func (c *udpSocket) Read(b []byte) (int, error) {
	c.gate.wait(1) // a datagram may be empty, so even len(b) == 0 reads one
	res, err, handled := c.io.readWait(c.ep, c.wq, b, tcpip.ReadOptions{})
	switch {
	case handled && err != nil:
		return 0, connError("read", "udp", err, c.LocalAddr(), nil)
	case handled:
		return res.Count, nil
	}
	return gonetN(c.UDPConn.Read(b))
}

// ReadFrom implements net.PacketConn.
func (c *udpSocket) ReadFrom(b []byte) (int, net.Addr, error) {
	c.gate.wait(1)
	n, from, err := c.UDPConn.ReadFrom(b)
	return n, from, gonetError(err)
}

// Write implements net.Conn.
func (c *udpSocket) Write(b []byte) (int, error) {
	c.drainErrors()
	n, err, done := c.io.write(c.ep, b, nil)
	switch {
	case done && err != nil:
		return n, connError("write", "udp", err, c.LocalAddr(), nil)
	case done:
		return n, nil
	}
	return gonetN(c.UDPConn.Write(b))
}

// WriteTo implements net.PacketConn.
func (c *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.drainErrors()
	if ua, ok := addr.(*net.UDPAddr); ok && c.io != nil {
		to := tcpip.FullAddress{Addr: tcpip.AddrFromSlice(ua.IP), Port: uint16(ua.Port)}
		n, err, done := c.io.write(c.ep, b, &to)
		switch {
		case done && err != nil:
			return n, connError("write", "udp", err, c.LocalAddr(), addr)
		case done:
			return n, nil
		}
	}
	return gonetN(c.UDPConn.WriteTo(b, addr))
}

// SetDeadline implements net.Conn.
func (c *udpSocket) SetDeadline(t time.Time) error {
	c.io.setDeadlines(t, true, true)
	return c.UDPConn.SetDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *udpSocket) SetReadDeadline(t time.Time) error {
	c.io.setDeadlines(t, true, false)
	return c.UDPConn.SetReadDeadline(t)
}

// SetWriteDeadline implements net.Conn.
func (c *udpSocket) SetWriteDeadline(t time.Time) error {
	c.io.setDeadlines(t, false, true)
	return c.UDPConn.SetWriteDeadline(t)
}

// Close implements net.Conn; it also ends a busy poll in progress. The
// second drain takes what arrived while the endpoint closed; only an ICMP
// error already inside gVisor's handler at that instant can still slip
// in, a window gVisor offers no hook to close.
func (c *udpSocket) Close() error {
	c.gate.close()
	c.drainErrors()
	err := c.UDPConn.Close()
	c.drainErrors()
	c.io.wake()
	return err
}

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
		return nil, l.acceptError(netError(terr))
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
