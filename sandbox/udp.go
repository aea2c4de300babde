package sandbox

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// udpFlow is one NAT mapping: the sandbox socket src talks through one
// host socket to every destination (endpoint-independent mapping, RFC
// 4787 REQ-1), and whatever the policy lets through comes back to src.
type udpFlow struct {
	s      *Sandbox
	src    netip.AddrPort
	v6     bool
	conn   *net.UDPConn
	rc     syscall.RawConn
	last   atomic.Int64 // time of the last datagram either way, UnixNano
	viaDNS atomic.Bool  // the sandbox sent queries to the DNS address

	mu   sync.Mutex // guards the destination cache
	toAP netip.AddrPort
	toSA unix.Sockaddr

	closeOnce sync.Once
}

// handleUDP takes a datagram from the sandbox that no gVisor endpoint
// wanted (all of them: ustack binds none), in the link's receive
// goroutine: it must not block. Returning false leaves the datagram to
// gVisor, which drops it and answers port unreachable.
func (s *Sandbox) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	hdr := header.UDP(pkt.TransportHeader().Slice())
	nh := pkt.Network()
	lengthOK, csumOK := header.UDPValid(hdr, func() uint16 { return pkt.Data().Checksum() },
		uint16(pkt.Data().Size()), pkt.NetworkProtocolNumber, nh.SourceAddress(), nh.DestinationAddress(), pkt.RXChecksumValidated)
	if !lengthOK || !csumOK {
		s.refuse(Malformed)
		return false
	}
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	src := netip.AddrPortFrom(addrOf(id.RemoteAddress), id.RemotePort)
	to, dns, reason, ok := s.pol.target(dst)
	if !ok {
		s.refuse(reason)
		return false
	}
	f, reason, ok := s.udpFlow(src)
	if !ok {
		s.refuse(reason)
		return true // no ICMP error for a limit: the sandbox would misread it
	}
	if dns {
		f.viaDNS.Store(true)
		s.c.dns.Add(1)
	}
	payload, _ := pkt.Data().PullUp(pkt.Data().Size())
	if f.send(payload, to) {
		s.c.udpPktUp.Add(1)
		s.c.udpUp.Add(uint64(len(payload)))
	}
	return true
}

// udpFlow returns src's mapping, making it if need be.
func (s *Sandbox) udpFlow(src netip.AddrPort) (*udpFlow, Reason, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.udp[src]; f != nil {
		return f, 0, true
	}
	if s.closed {
		return nil, HostError, false
	}
	if r, ok := s.reserveFlow(&s.c.udpFlows, s.cfg.MaxUDP, UDPLimit); !ok {
		return nil, r, false
	}
	// One dual-stack socket serves either family of destination (an IPv6
	// sandbox socket may query an IPv4 resolver); fall back to IPv4 on a
	// host without IPv6.
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil && src.Addr().Is4() {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	}
	var rc syscall.RawConn
	if err == nil {
		rc, err = conn.SyscallConn()
		if err != nil {
			conn.Close()
		}
	}
	if err != nil {
		s.c.udpFlows.Add(-1)
		return nil, HostError, false
	}
	f := &udpFlow{s: s, src: src, v6: src.Addr().Is6(), conn: conn, rc: rc}
	f.touch()
	s.udp[src] = f
	s.c.udpOpened.Add(1)
	s.wg.Add(1)
	go f.receiveLoop()
	return f, 0, true
}

func (f *udpFlow) touch() { f.last.Store(time.Now().UnixNano()) }

// send passes a datagram to the host without blocking; a full socket
// buffer drops it (counted), as a full device queue would.
func (f *udpFlow) send(b []byte, to netip.AddrPort) bool {
	f.mu.Lock()
	if f.toAP != to || f.toSA == nil {
		f.toAP, f.toSA = to, sockaddr(to, f.conn)
	}
	sa := f.toSA
	f.mu.Unlock()
	var e error
	if err := f.rc.Write(func(fd uintptr) bool {
		e = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		return true
	}); err != nil {
		e = err
	}
	f.touch()
	switch {
	case e == nil:
		return true
	case errors.Is(e, unix.EAGAIN) || errors.Is(e, unix.ENOBUFS):
		f.s.c.udpDropped.Add(1)
	default:
		f.s.refuse(HostError)
	}
	return false
}

// sockaddr is to in the form conn's family takes.
func sockaddr(to netip.AddrPort, conn *net.UDPConn) unix.Sockaddr {
	if la, ok := conn.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() == nil {
		return &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	return &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().Unmap().As4()}
}

// receiveLoop relays datagrams from the host to the sandbox until the
// mapping has been idle for UDPIdleTimeout or the sandbox closes. It holds
// no buffer while it waits: each datagram is read, once its size is known,
// straight into the packet that carries it to the sandbox.
func (f *udpFlow) receiveLoop() {
	s := f.s
	defer s.wg.Done()
	defer f.close()
	for {
		deadline := time.Unix(0, f.last.Load()).Add(s.cfg.UDPIdleTimeout)
		if !time.Now().Before(deadline) {
			return
		}
		f.conn.SetReadDeadline(deadline)
		err := f.rc.Read(func(fd uintptr) bool {
			// Drain the socket: the poller reports it readable once per
			// arrival, not while data is queued. An error (an ICMP error
			// the kernel reports once, EINTR) is retried, since a datagram
			// may still wait behind it; a few in a row mean give up until
			// the next arrival.
			for errs := 0; errs < 8; {
				switch f.receiveOne(int(fd)) {
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
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
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

// receiveOne moves one datagram from the host socket to the sandbox.
func (f *udpFlow) receiveOne(fd int) recvResult {
	s := f.s
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
	hlen := header.IPv4MinimumSize + header.UDPMinimumSize
	if f.v6 {
		hlen = header.IPv6MinimumSize + header.UDPMinimumSize
	}
	v := buffer.NewViewSize(hlen + n)
	b := v.AsSlice()
	m, from, err := unix.Recvfrom(fd, b[hlen:], unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	if err != nil {
		v.Release()
		return recvError
	}
	f.touch()
	ap := fromSockaddr(from)
	src, ok := s.pol.source(ap, f.viaDNS.Load(), f.v6)
	switch {
	case !ok:
		s.refuse(policyReason(s, ap))
	case m > n || hlen+m > int(s.cfg.MTU) || m > 0xffff-header.UDPMinimumSize:
		// Truncated (cannot happen: we are the socket's only reader), or
		// cannot be sent whole: the device carries no fragments we make.
		s.c.udpDropped.Add(1)
	case src.Addr().Is4() != f.src.Addr().Is4():
		s.refuse(Denied)
	default:
		v.CapLength(hlen + m)
		encodeUDP(v.AsSlice(), src, f.src, m)
		proto := header.IPv4ProtocolNumber
		if f.v6 {
			proto = header.IPv6ProtocolNumber
		}
		if terr := s.st.GVisor().WriteRawPacket(s.nic, proto, buffer.MakeWithView(v)); terr != nil {
			s.c.udpDropped.Add(1)
		} else {
			s.c.udpPktDn.Add(1)
			s.c.udpDn.Add(uint64(m))
		}
		return received
	}
	v.Release()
	return received
}

// policyReason says why a datagram from ap may not reach the sandbox.
func policyReason(s *Sandbox, ap netip.AddrPort) Reason {
	if ap.Addr().Unmap().IsLoopback() {
		return HostLoopback
	}
	r, _ := s.pol.allowed(ap.Addr().Unmap())
	return r
}

// encodeUDP writes the IP and UDP headers in front of a payload of n bytes
// in b, with full checksums (the packet goes out as if from src).
func encodeUDP(b []byte, src, dst netip.AddrPort, n int) {
	srcA := tcpip.AddrFromSlice(src.Addr().AsSlice())
	dstA := tcpip.AddrFromSlice(dst.Addr().AsSlice())
	ulen := uint16(header.UDPMinimumSize + n)
	var u header.UDP
	if src.Addr().Is4() {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(b)),
			TTL:         64,
			Protocol:    uint8(header.UDPProtocolNumber),
			SrcAddr:     srcA,
			DstAddr:     dstA,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
		u = header.UDP(b[header.IPv4MinimumSize:])
	} else {
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength:     ulen,
			TransportProtocol: header.UDPProtocolNumber,
			HopLimit:          64,
			SrcAddr:           srcA,
			DstAddr:           dstA,
		})
		u = header.UDP(b[header.IPv6MinimumSize:])
	}
	u.Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: ulen})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, srcA, dstA, ulen)
	xsum = checksum.Checksum(u[header.UDPMinimumSize:], xsum)
	c := ^u.CalculateChecksum(xsum)
	if c == 0 {
		c = 0xffff // zero means "no checksum" in UDP
	}
	u.SetChecksum(c)
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

// close ends the mapping; its receive loop exits and the flow is forgotten.
func (f *udpFlow) close() {
	f.closeOnce.Do(func() {
		f.conn.Close()
		s := f.s
		s.mu.Lock()
		if s.udp[f.src] == f {
			delete(s.udp, f.src)
		}
		s.mu.Unlock()
		s.c.udpFlows.Add(-1)
	})
}
