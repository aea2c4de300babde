package stack

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
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
	return &net.OpError{Op: op, Net: network, Source: local, Addr: remote, Err: TranslateError(err)}
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
// busy-polling reads (gate), cached fast paths (io), waiting for room in a
// full NIC queue (room).
//
// With IP_RECVERR, gVisor queues every ICMP error the socket receives,
// with a copy of the offending datagram, on an error queue that gonet
// cannot read and that gVisor neither bounds nor releases at Close. The
// socket empties that queue, releasing each copy, before each write and
// read and at Close, so it neither grows nor leaks. IP_RECVERR is on from
// the start under UDPRecvErr; a socket that waits for room needs it only
// to learn of refusals, so it sets it at its first write: a socket that
// never writes queues nothing.
type udpSocket struct {
	*gonet.UDPConn
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	recvErr atomic.Bool // IP_RECVERR is set
	gate    *readGate
	io      *connIO
	room    *roomWait    // nil: a refused write fails at once
	wdl     atomic.Int64 // write deadline (Unix ns, 0: none); bounds a wait for room
}

// roomWait is how a UDP socket's write that a full NIC queue refused waits
// for room and retries, as a Linux socket waits for send buffer. It runs
// in the writer's goroutine; the qdisc itself never waits.
type roomWait struct {
	st     *Stack
	wait   time.Duration // the longest wait of one write
	report bool          // a write still refused fails (UDPRecvErr); otherwise it is dropped
	proto  tcpip.NetworkProtocolNumber
	// last is the room signal of the queue that last refused a connected
	// write. Later connected writes (same route) look at it first and
	// wait while that queue is full, as a Linux socket waits for send
	// buffer before it builds the packet, rather than be refused and
	// counted by the qdisc first.
	last atomic.Pointer[roomSource]
}

// roomSource boxes a RoomNotifier for an atomic.Pointer.
type roomSource struct{ sched.RoomNotifier }

// noBufferSpace is the message of the refusal a full queue gives, as
// gonet's conns flatten it before gonetN translates it.
var noBufferSpace = (&tcpip.ErrNoBufferSpace{}).String()

// refused reports whether err is a write refused for lack of room:
// ENOBUFS as connError and gonetN translate it, or gonet's untranslated
// message.
func refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOBUFS) {
		return true
	}
	oe, ok := err.(*net.OpError)
	return ok && oe.Err != nil && oe.Err.Error() == noBufferSpace
}

// send writes one datagram (writeOnce), waiting for room in a full NIC
// queue: before a connected write, while the queue that refused the last
// one is still full; after a refusal, for that queue's room signal, and
// then it tries again. All of one write's waits end together, when
// Options.UDPWait or the write deadline is over. A datagram still refused
// then fails with the refusal if the socket reports it (UDPRecvErr), and
// is otherwise dropped as the kernel drops it for a socket without
// IP_RECVERR: the write succeeds, the drop is counted (NIC
// TxPacketsDroppedNoBufferSpace).
func (c *udpSocket) send(b []byte, to *tcpip.FullAddress, addr net.Addr) (int, error) {
	r := c.room
	if r == nil {
		return c.writeOnce(b, to, addr)
	}
	if !c.recvErr.Load() {
		setRecvErr(c.ep)
		c.recvErr.Store(true)
	}
	var (
		deadline time.Time
		t        *time.Timer
	)
	if to == nil {
		if src := r.last.Load(); src != nil {
			if room := src.Room(); !isClosed(room) {
				c.await(room, &deadline, &t)
			}
		}
	}
	n, err := c.writeOnce(b, to, addr)
	for refused(err) {
		rn := c.roomFor(to)
		if rn == nil {
			break
		}
		if to == nil {
			if src := r.last.Load(); src == nil || src.RoomNotifier != rn {
				r.last.Store(&roomSource{rn})
			}
		}
		if !c.await(rn.Room(), &deadline, &t) {
			break
		}
		n, err = c.writeOnce(b, to, addr)
	}
	if t != nil {
		t.Stop()
	}
	if refused(err) && !r.report {
		return len(b), nil
	}
	return n, err
}

// isClosed reports whether a room signal has fired.
func isClosed(room <-chan struct{}) bool {
	select {
	case <-room:
		return true
	default:
		return false
	}
}

// await waits for room, or until the write's deadline, which it sets on
// its first call (UDPWait from now, or the write deadline if sooner). It
// reports false, without waiting, if the deadline has passed, and true
// otherwise: the caller tries once more.
func (c *udpSocket) await(room <-chan struct{}, deadline *time.Time, t **time.Timer) bool {
	now := time.Now()
	if deadline.IsZero() {
		*deadline = now.Add(c.room.wait)
		if d := c.wdl.Load(); d != 0 && d < deadline.UnixNano() {
			*deadline = time.Unix(0, d)
		}
	}
	left := deadline.Sub(now)
	if left <= 0 {
		return false
	}
	if *t == nil {
		*t = time.NewTimer(left)
	} else {
		(*t).Reset(left)
	}
	select {
	case <-room:
	case <-(*t).C:
	}
	return true
}

// roomFor returns the room signal of the NIC queue a datagram to to (nil:
// the connected peer) leaves by, or nil if there is none to wait for.
func (c *udpSocket) roomFor(to *tcpip.FullAddress) sched.RoomNotifier {
	local, err := c.ep.GetLocalAddress()
	if err != nil {
		return nil
	}
	var remote tcpip.FullAddress
	if to != nil {
		remote = *to
	} else if remote, err = c.ep.GetRemoteAddress(); err != nil {
		return nil
	}
	if c.room.proto == header.IPv4ProtocolNumber && remote.Addr.Len() == net.IPv6len {
		// A net.UDPAddr may carry an IPv4 address in its 16-byte form.
		if ip4 := net.IP(remote.Addr.AsSlice()).To4(); ip4 != nil {
			remote.Addr = tcpip.AddrFromSlice(ip4)
		}
	}
	return c.room.st.roomFor(local, remote, c.room.proto)
}

func (c *udpSocket) drainErrors() {
	if !c.recvErr.Load() {
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
	c.drainErrors()
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
	c.drainErrors()
	c.gate.wait(1)
	n, from, err := c.UDPConn.ReadFrom(b)
	return n, from, gonetError(err)
}

// Write implements net.Conn. A write that a full NIC queue refuses waits
// for room (Options.UDPWait).
func (c *udpSocket) Write(b []byte) (int, error) {
	return c.send(b, nil, nil)
}

// WriteTo implements net.PacketConn. A write that a full NIC queue refuses
// waits for room (Options.UDPWait).
func (c *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	var to *tcpip.FullAddress
	if ua, ok := addr.(*net.UDPAddr); ok {
		to = &tcpip.FullAddress{Addr: tcpip.AddrFromSlice(ua.IP), Port: uint16(ua.Port)}
	}
	return c.send(b, to, addr)
}

// writeOnce writes one datagram: to addr (to is its tcpip form, nil if it
// is not a *net.UDPAddr), or to the connected peer if addr is nil, as
// gonet's WriteTo does.
func (c *udpSocket) writeOnce(b []byte, to *tcpip.FullAddress, addr net.Addr) (int, error) {
	c.drainErrors()
	if addr == nil || to != nil {
		n, err, done := c.io.write(c.ep, b, to)
		switch {
		case done && err != nil:
			return n, connError("write", "udp", err, c.LocalAddr(), addr)
		case done:
			return n, nil
		}
	}
	if addr == nil {
		return gonetN(c.UDPConn.Write(b))
	}
	return gonetN(c.UDPConn.WriteTo(b, addr))
}

// SetDeadline implements net.Conn.
func (c *udpSocket) SetDeadline(t time.Time) error {
	c.wdl.Store(deadlineNanos(t))
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
	c.wdl.Store(deadlineNanos(t))
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
