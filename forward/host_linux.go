package forward

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
)

// hostFlow relays one UDP flow through one host socket (full cone): the
// peer's datagrams are sent in the stack's receive path, without a queue
// or a goroutine hop; the host's are read, once their size is known,
// straight into the packet that carries them to the peer.
type hostFlow struct {
	r    *relay
	u    *UDPFlow
	conn *net.UDPConn
	rc   syscall.RawConn
	v6   bool // the socket is IPv6 (dual-stack)

	mu     sync.Mutex // guards the destination cache and viaDNS
	toAP   netip.AddrPort
	toSA   unix.Sockaddr
	viaDNS netip.Addr
}

// hostUDP serves u until it closes; false means no host socket could be
// had.
func hostUDP(r *relay, u *UDPFlow) bool {
	// One dual-stack socket serves either family of destination (an IPv6
	// peer socket may query an IPv4 resolver); fall back to IPv4 on a
	// host without IPv6.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil && u.src.Addr().Is4() {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	}
	if err != nil {
		return false
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return false
	}
	h := &hostFlow{r: r, u: u, conn: c, rc: rc}
	if la, ok := c.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() == nil {
		h.v6 = true
	}
	u.atClose(func() { c.Close() })
	for _, d := range u.setInline(h.send) {
		h.send(d.b, d.dst)
	}
	h.receiveLoop()
	return true
}

// send passes a datagram to the host without blocking; a full socket
// buffer drops it (counted), as a full device queue would.
func (h *hostFlow) send(b []byte, dst netip.AddrPort) bool {
	f := h.u.f
	to, dns, reason, ok := h.r.pol.target(dst)
	if !ok {
		h.u.refuseDatagram(reason, b, dst)
		return false
	}
	h.mu.Lock()
	if dns.IsValid() {
		h.viaDNS = dns
		f.c.dns.Add(1)
	}
	if h.toAP != to || h.toSA == nil {
		h.toAP, h.toSA = to, h.sockaddr(to)
	}
	sa := h.toSA
	h.mu.Unlock()
	var e error
	if err := h.rc.Write(func(fd uintptr) bool {
		e = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		return true
	}); err != nil {
		e = err
	}
	switch {
	case e == nil:
		return true
	case errors.Is(e, unix.EAGAIN) || errors.Is(e, unix.ENOBUFS):
		f.c.udpDropped.Add(1)
	default:
		h.u.refuseDatagram(HostError, b, dst)
	}
	return false
}

// sockaddr is to in the form the socket's family takes.
func (h *hostFlow) sockaddr(to netip.AddrPort) unix.Sockaddr {
	if h.v6 {
		return &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	return &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().Unmap().As4()}
}

// receiveLoop relays datagrams from the host to the peer until the flow
// closes (which closes the socket).
func (h *hostFlow) receiveLoop() {
	for {
		err := h.rc.Read(func(fd uintptr) bool {
			// Drain the socket: the poller reports it readable once per
			// arrival, not while data is queued. An error (an ICMP error
			// the kernel reports once, EINTR) is retried, since a datagram
			// may still wait behind it; a few in a row mean give up until
			// the next arrival.
			for errs := 0; errs < 8; {
				switch h.receiveOne(int(fd)) {
				case received:
					errs = 0
				case empty:
					return false
				default:
					errs++
				}
			}
			return false
		})
		if err != nil {
			return // closed
		}
	}
}

// What receiveOne found.
type recvResult int

const (
	received  recvResult = iota // a datagram, passed on or counted as refused
	empty                       // nothing to read
	recvError                   // an error instead of a datagram
)

// receiveOne moves one datagram from the host socket to the peer.
func (h *hostFlow) receiveOne(fd int) recvResult {
	u, f := h.u, h.u.f
	// Peek at the next datagram's length first (MSG_TRUNC reports it
	// whole), so it lands in a packet of its size; SIOCINQ would race
	// with a datagram arriving between the two calls.
	n, _, err := unix.Recvfrom(fd, nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return empty
	}
	if err != nil {
		return recvError
	}
	hlen := udpHeaderLen(u.src)
	v := buffer.NewViewSize(hlen + n)
	m, from, err := unix.Recvfrom(fd, v.AsSlice()[hlen:], unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	if err != nil {
		v.Release()
		return recvError
	}
	u.touch()
	h.mu.Lock()
	via := h.viaDNS
	h.mu.Unlock()
	src, reason, ok := h.r.pol.source(fromSockaddr(from), via, u.src.Addr().Is6())
	switch {
	case !ok:
		f.refuse(reason)
	case m > n:
		// Truncated: cannot happen, we are the socket's only reader.
		f.c.udpDropped.Add(1)
	case src.Addr().Is4() != u.src.Addr().Is4():
		f.refuse(Denied)
	default:
		u.writeView(v, src, m) // takes v; counts a drop itself
		return received
	}
	v.Release()
	return received
}

// fromSockaddr converts a sender's address.
func fromSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}
