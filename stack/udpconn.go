package stack

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/sched"
)

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
