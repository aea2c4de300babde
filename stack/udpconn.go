package stack

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/deadline"
	"github.com/ustack-dev/ustack/sched"
)

// udpSocket is the stack's UDP socket: a net.Conn (to its connected
// peer) and a net.PacketConn, what DialUDP and ListenUDP return, that can
// also drain IP_RECVERR's queue (recvErr) and wait for room in a full NIC
// queue (room).
//
// With IP_RECVERR, gVisor queues every ICMP error the socket receives,
// with a copy of the offending datagram, on an error queue that nothing
// here reads and that gVisor neither bounds nor releases at Close. The
// socket empties that queue, releasing each copy, before each write and
// read and at Close, so it neither grows nor leaks. IP_RECVERR is on from
// the start under UDPRecvErr; a socket that waits for room needs it only
// to learn of refusals, so it sets it at its first write: a socket that
// never writes queues nothing.
type udpSocket struct {
	sock
	recvErr atomic.Bool // IP_RECVERR is set
	room    *roomWait   // nil: a refused write fails at once
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

// refused reports whether err, a write's, is a refusal for lack of room.
func refused(err error) bool { return err == syscall.ENOBUFS }

// send writes one datagram to *to (nil: the connected peer) through
// sendRoom; addr is to as the caller gave it, for the error.
func (c *udpSocket) send(b []byte, to *tcpip.FullAddress, addr net.Addr) (int, error) {
	n, err := c.sendRoom(b, to)
	if err != nil {
		return n, c.opError("write", addr, err)
	}
	return n, nil
}

// sendRoom writes one datagram (writeOnce), waiting for room in a full NIC
// queue: before a connected write, while the queue that refused the last
// one is still full; after a refusal, for that queue's room signal, and
// then it tries again. All of one write's waits for room end together,
// when Options.UDPWait is over: a datagram still refused then fails with
// the refusal if the socket reports it (UDPRecvErr), and is otherwise
// dropped as the kernel drops it for a socket without IP_RECVERR: the
// write succeeds, the drop is counted (NIC TxPacketsDroppedNoBufferSpace).
// The write deadline and Close end a wait too, with their own errors.
func (c *udpSocket) sendRoom(b []byte, to *tcpip.FullAddress) (int, error) {
	r := c.room
	if r == nil {
		return c.writeOnce(b, to)
	}
	if !c.recvErr.Load() {
		setRecvErr(c.ep)
		c.recvErr.Store(true)
	}
	var bound *deadline.Deadline // UDPWait from the first wait on; made only if the write waits
	defer func() {
		if bound != nil {
			bound.Stop()
		}
	}()
	if to == nil {
		if src := r.last.Load(); src != nil {
			if room := src.Room(); !fired(room) {
				if _, err := c.await(room, &bound); err != nil {
					return 0, err
				}
			}
		}
	}
	n, err := c.writeOnce(b, to)
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
		again, werr := c.await(rn.Room(), &bound)
		if werr != nil {
			return n, werr
		}
		if !again {
			break
		}
		n, err = c.writeOnce(b, to)
	}
	if refused(err) && !r.report {
		return len(b), nil
	}
	return n, err
}

// fired reports whether a room signal has fired.
func fired(room <-chan struct{}) bool {
	select {
	case <-room:
		return true
	default:
		return false
	}
}

// await waits for room, or until the write's bound (Options.UDPWait from
// its first wait, which makes it), the write deadline or Close. again
// says whether to try the write once more: false once the bound is over;
// err is the write deadline's or Close's.
func (c *udpSocket) await(room <-chan struct{}, bound **deadline.Deadline) (again bool, err error) {
	if *bound == nil {
		*bound = new(deadline.Deadline)
		(*bound).Set(time.Now().Add(c.room.wait))
	}
	select {
	case <-room:
		return true, nil
	case <-(*bound).Done():
		return false, nil
	case <-c.wd.Done():
		return false, os.ErrDeadlineExceeded
	case <-c.done:
		return false, net.ErrClosed
	}
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

func (c *udpSocket) opError(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: "udp", Source: c.LocalAddr(), Addr: addr, Err: err}
}

// Read implements net.Conn: it reads one datagram, truncated to len(b).
func (c *udpSocket) Read(b []byte) (int, error) {
	c.drainErrors()
	res, err := c.read(b, tcpip.ReadOptions{})
	if err != nil {
		return 0, c.opError("read", nil, err)
	}
	return res.Count, nil
}

// ReadFrom implements net.PacketConn.
func (c *udpSocket) ReadFrom(b []byte) (int, net.Addr, error) {
	c.drainErrors()
	res, err := c.read(b, tcpip.ReadOptions{NeedRemoteAddr: true})
	if err != nil {
		return 0, nil, c.opError("read", nil, err)
	}
	return res.Count, &net.UDPAddr{IP: res.RemoteAddr.Addr.AsSlice(), Port: int(res.RemoteAddr.Port)}, nil
}

// Write implements net.Conn. A write that a full NIC queue refuses waits
// for room (Options.UDPWait).
func (c *udpSocket) Write(b []byte) (int, error) {
	return c.send(b, nil, nil)
}

// WriteTo implements net.PacketConn: addr is a *net.UDPAddr (nil: the
// connected peer). A write that a full NIC queue refuses waits for room
// (Options.UDPWait).
func (c *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	if addr == nil {
		return c.Write(b)
	}
	ua, ok := addr.(*net.UDPAddr)
	if !ok || ua == nil {
		return 0, c.opError("write", addr, fmt.Errorf("destination %v is a %T: want a *net.UDPAddr", addr, addr))
	}
	to := tcpip.FullAddress{Addr: tcpip.AddrFromSlice(ua.IP), Port: uint16(ua.Port)}
	return c.send(b, &to, addr)
}

// writeOnce writes one datagram to *to (nil: the connected peer),
// waiting while the endpoint's send buffer is full.
func (c *udpSocket) writeOnce(b []byte, to *tcpip.FullAddress) (int, error) {
	c.drainErrors()
	return c.write(b, to, false)
}

// Close implements net.Conn: it aborts reads and writes in progress,
// with net.ErrClosed, and closes the endpoint. The second drain takes
// what arrived while the endpoint closed; only an ICMP error already
// inside gVisor's handler at that instant can still slip in, a window
// gVisor offers no hook to close.
func (c *udpSocket) Close() error {
	c.drainErrors()
	c.close()
	c.drainErrors()
	return nil
}

// LocalAddr implements net.Conn; nil once the endpoint has none.
func (c *udpSocket) LocalAddr() net.Addr {
	a, terr := c.ep.GetLocalAddress()
	if terr != nil {
		return nil
	}
	return &net.UDPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
}

// RemoteAddr implements net.Conn: the connected peer, else nil.
func (c *udpSocket) RemoteAddr() net.Addr {
	a, terr := c.ep.GetRemoteAddress()
	if terr != nil {
		return nil
	}
	return &net.UDPAddr{IP: a.Addr.AsSlice(), Port: int(a.Port)}
}
