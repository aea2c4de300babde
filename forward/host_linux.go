package forward

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
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
	c, err := listenHostUDP(u.f.ctx, r.host, u.src.Addr().Is4())
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

// listenHostUDP opens a flow's host socket as d opens its own (its Control,
// the address of its LocalAddr). Without a LocalAddr, one dual-stack
// socket serves either family of destination (an IPv6 peer socket may
// query an IPv4 resolver), or an IPv4 one for an IPv4 peer on a host
// without IPv6.
func listenHostUDP(ctx context.Context, d *net.Dialer, v4 bool) (*net.UDPConn, error) {
	lc := listenConfig(ctx, d)
	var pc net.PacketConn
	var err error
	if la := dialerLocalIP(d); la.IsValid() {
		network := "udp4"
		if la.Is6() {
			network = "udp6"
		}
		pc, err = lc.ListenPacket(ctx, network, netip.AddrPortFrom(la, 0).String())
	} else {
		pc, err = lc.ListenPacket(ctx, "udp", "[::]:0")
		if err != nil && v4 {
			pc, err = lc.ListenPacket(ctx, "udp4", "0.0.0.0:0")
		}
	}
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// listenPingDgram opens an ICMP datagram socket ("ping socket") bound to
// laddr, handing it to control (if not nil) first, as the net package
// does with the sockets it makes: package net opens none of this kind.
// network names it to control.
func listenPingDgram(control controlFunc, network string, laddr netip.Addr) (net.PacketConn, error) {
	var family, proto int
	var sa unix.Sockaddr
	if laddr.Is6() {
		family, proto, sa = unix.AF_INET6, unix.IPPROTO_ICMPV6, &unix.SockaddrInet6{Addr: laddr.As16()}
	} else {
		family, proto, sa = unix.AF_INET, unix.IPPROTO_ICMP, &unix.SockaddrInet4{Addr: laddr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "icmp-dgram")
	defer f.Close() // net.FilePacketConn holds a copy
	if control != nil {
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, err
		}
		if err := control(network, laddr.String(), rc); err != nil {
			return nil, err
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	return net.FilePacketConn(f)
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
