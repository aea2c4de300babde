package forward

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/deadline"
	"github.com/ustack-dev/ustack/stack"
)

// UDPFlow is one peer socket's UDP traffic through the stack, to every
// destination: endpoint-independent mapping and filtering (RFC 4787
// REQ-1, full cone). It is a net.PacketConn seen from the destinations'
// side: ReadFrom returns what the peer sent with the destination it sent
// it to, WriteTo sends the peer a datagram from any address. Safe for
// concurrent use.
type UDPFlow struct {
	f    *Forwarder
	fl   *flow
	src  netip.AddrPort
	nic  tcpip.NICID
	last atomic.Int64 // last datagram either way, UnixNano

	mu      sync.Mutex
	queue   []datagram
	queued  int // bytes in queue
	closed  bool
	inline  func([]byte, netip.AddrPort) bool // Relay's direct path; nil for reads
	onClose []func()
	ready   chan struct{} // signalled on arrival and close
	rdl     deadline.Deadline
	idle    *time.Timer
}

type datagram struct {
	b   []byte
	dst netip.AddrPort
}

// Src is the peer's address and port.
func (u *UDPFlow) Src() netip.AddrPort { return u.src }

// handleUDP takes a datagram no endpoint of the stack wanted, in the
// link's receive goroutine: it must not block. Returning false leaves it
// to gVisor, which drops it and answers port unreachable.
func (f *Forwarder) handleUDP(id gstack.TransportEndpointID, pkt *gstack.PacketBuffer) bool {
	hdr := header.UDP(pkt.TransportHeader().Slice())
	nh := pkt.Network()
	lengthOK, csumOK := header.UDPValid(hdr, func() uint16 { return pkt.Data().Checksum() },
		uint16(pkt.Data().Size()), pkt.NetworkProtocolNumber, nh.SourceAddress(), nh.DestinationAddress(), pkt.RXChecksumValidated)
	if !lengthOK || !csumOK {
		f.refuse(Malformed)
		return false
	}
	src := netip.AddrPortFrom(addrOf(id.RemoteAddress), id.RemotePort)
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	f.mu.Lock()
	u := f.udp[src]
	if u == nil {
		fl, reason, ok := f.openLocked(UDP, src, dst)
		if !ok {
			f.mu.Unlock()
			// gVisor answers port unreachable, as for any refusal.
			f.refuse(reason)
			return false
		}
		u = &UDPFlow{f: f, fl: fl, src: src, nic: pkt.NICID, ready: make(chan struct{}, 1)}
		u.touch()
		f.udp[src] = u
		fl.abort = u.closeAbort
		f.wg.Add(1)
		u.idle = time.AfterFunc(f.o.UDPIdleTimeout, u.checkIdle)
		go func() {
			defer f.wg.Done()
			defer u.Close()
			f.h.HandleUDP(u)
		}()
	}
	f.mu.Unlock()
	payload, _ := pkt.Data().PullUp(pkt.Data().Size())
	u.deliver(payload, dst)
	return true
}

func (u *UDPFlow) touch() { u.last.Store(time.Now().UnixNano()) }

// checkIdle ends the flow once it has been idle for UDPIdleTimeout, or
// re-arms the timer for when it could be.
func (u *UDPFlow) checkIdle() {
	idle := u.f.o.UDPIdleTimeout
	left := time.Until(time.Unix(0, u.last.Load()).Add(idle))
	if left > 0 {
		u.mu.Lock()
		if !u.closed {
			u.idle.Reset(left)
		}
		u.mu.Unlock()
		return
	}
	u.Close()
}

// deliver passes a datagram from the peer (b is borrowed) to the handler.
func (u *UDPFlow) deliver(b []byte, dst netip.AddrPort) {
	u.touch()
	f := u.f
	u.mu.Lock()
	if in := u.inline; in != nil && !u.closed {
		u.mu.Unlock()
		if in(b, dst) {
			u.countUp(len(b))
		}
		return
	}
	if u.closed || u.queued+len(b) > f.o.UDPQueue {
		u.mu.Unlock()
		f.c.udpDropped.Add(1)
		return
	}
	u.queue = append(u.queue, datagram{b: append([]byte(nil), b...), dst: dst})
	u.queued += len(b)
	u.mu.Unlock()
	u.countUp(len(b))
	u.signal()
}

// refuseDatagram counts a datagram of the peer's refused for r (b, to
// dst; b stays the caller's) and tells the peer with an ICMP port
// unreachable.
func (u *UDPFlow) refuseDatagram(r Reason, b []byte, dst netip.AddrPort) {
	u.f.refuse(r)
	u.f.portUnreachable(u.nic, u.src, dst, b)
}

// refuseFlow counts a flow its handler cannot serve at all (r: the host
// refused a socket, say), telling the peer about each datagram queued:
// the flow ends, and the peer's next datagram starts another.
func (u *UDPFlow) refuseFlow(r Reason) {
	u.f.refuse(r)
	u.mu.Lock()
	q := u.queue
	u.queue, u.queued = nil, 0
	u.mu.Unlock()
	for _, d := range q {
		u.f.portUnreachable(u.nic, u.src, d.dst, d.b)
	}
}

func (u *UDPFlow) countUp(n int) {
	u.fl.rx.Add(uint64(n))
	u.f.c.udpPktUp.Add(1)
	u.f.c.udpUp.Add(uint64(n))
}

func (u *UDPFlow) signal() {
	select {
	case u.ready <- struct{}{}:
	default:
	}
}

// setInline makes in take the flow's datagrams in the receive path (it
// must not block; it reports whether it sent the datagram), after the
// ones queued so far, which it returns.
func (u *UDPFlow) setInline(in func([]byte, netip.AddrPort) bool) []datagram {
	u.mu.Lock()
	defer u.mu.Unlock()
	q := u.queue
	u.queue, u.queued, u.inline = nil, 0, in
	return q
}

// ReadFromAddrPort reads the next datagram the peer sent into b and
// returns its destination. A datagram longer than b is truncated.
func (u *UDPFlow) ReadFromAddrPort(b []byte) (int, netip.AddrPort, error) {
	for {
		u.mu.Lock()
		if len(u.queue) > 0 {
			d := u.queue[0]
			u.queue[0] = datagram{}
			u.queue = u.queue[1:]
			u.queued -= len(d.b)
			u.mu.Unlock()
			return copy(b, d.b), d.dst, nil
		}
		if u.closed {
			u.mu.Unlock()
			return 0, netip.AddrPort{}, u.opError("read", net.ErrClosed)
		}
		u.mu.Unlock()
		// Taken before the check: a deadline that passes after it closes
		// this channel.
		expired := u.rdl.Done()
		if u.rdl.Passed() {
			return 0, netip.AddrPort{}, u.opError("read", os.ErrDeadlineExceeded)
		}
		select {
		case <-u.ready:
		case <-expired:
		}
	}
}

// ReadFrom implements net.PacketConn: addr is the datagram's destination
// (a *net.UDPAddr).
func (u *UDPFlow) ReadFrom(b []byte) (int, net.Addr, error) {
	n, dst, err := u.ReadFromAddrPort(b)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(dst), nil
}

// WriteToAddrPort sends b to the peer as a datagram from from, which must
// be of the peer's IP version. b stays the caller's.
func (u *UDPFlow) WriteToAddrPort(b []byte, from netip.AddrPort) (int, error) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	if from.Addr().Is4() != u.src.Addr().Is4() {
		return 0, u.opError("write", fmt.Errorf("source %v is not of the peer's IP version", from))
	}
	hlen := udpHeaderLen(u.src)
	v := buffer.NewViewSize(hlen + len(b))
	copy(v.AsSlice()[hlen:], b)
	if err := u.writeView(v, from, len(b)); err != nil {
		return 0, u.opError("write", err)
	}
	return len(b), nil
}

// WriteTo implements net.PacketConn: addr (a *net.UDPAddr) is the source
// the peer sees.
func (u *UDPFlow) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, u.opError("write", fmt.Errorf("address %v is not a *net.UDPAddr", addr))
	}
	return u.WriteToAddrPort(b, ua.AddrPort())
}

func udpHeaderLen(peer netip.AddrPort) int {
	if peer.Addr().Is4() {
		return header.IPv4MinimumSize + header.UDPMinimumSize
	}
	return header.IPv6MinimumSize + header.UDPMinimumSize
}

var errTooBig = errors.New("datagram does not fit the NIC's MTU")

// writeView sends a datagram of n bytes, already at its place in v after
// room for the headers (udpHeaderLen), to the peer from from. It takes v.
func (u *UDPFlow) writeView(v *buffer.View, from netip.AddrPort, n int) error {
	u.mu.Lock()
	closed := u.closed
	u.mu.Unlock()
	f := u.f
	hlen := udpHeaderLen(u.src)
	switch {
	case closed:
		v.Release()
		return net.ErrClosed
	case hlen+n > int(f.mtu(u.nic)) || n > 0xffff-header.UDPMinimumSize:
		// The NIC carries no fragments we make.
		v.Release()
		f.c.udpDropped.Add(1)
		return errTooBig
	}
	v.CapLength(hlen + n)
	encodeUDP(v.AsSlice(), from, u.src, n)
	proto := header.IPv4ProtocolNumber
	if u.src.Addr().Is6() {
		proto = header.IPv6ProtocolNumber
	}
	if terr := f.gs.WriteRawPacket(u.nic, proto, buffer.MakeWithView(v)); terr != nil {
		f.c.udpDropped.Add(1)
		return stack.TranslateError(terr)
	}
	u.touch()
	u.fl.tx.Add(uint64(n))
	f.c.udpPktDn.Add(1)
	f.c.udpDn.Add(uint64(n))
	return nil
}

// mtu is the NIC's MTU: as New found it for the forwarded NICs (asking
// gVisor copies every NIC's information, too slow for each reply).
func (f *Forwarder) mtu(id tcpip.NICID) uint32 {
	if m, ok := f.mtus[id]; ok {
		return m
	}
	if info, ok := f.gs.NICInfo()[id]; ok {
		return info.MTU
	}
	return 0
}

func (u *UDPFlow) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "udp", Source: net.UDPAddrFromAddrPort(u.src), Err: err}
}

// LocalAddr implements net.PacketConn: it is the peer's address (Src),
// the one end every datagram of the flow shares.
func (u *UDPFlow) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(u.src) }

// SetDeadline implements net.PacketConn; writes never block, so it sets
// the read deadline.
func (u *UDPFlow) SetDeadline(t time.Time) error { return u.SetReadDeadline(t) }

// SetReadDeadline implements net.PacketConn.
func (u *UDPFlow) SetReadDeadline(t time.Time) error {
	u.rdl.Set(t)
	return nil
}

// SetWriteDeadline implements net.PacketConn; writes never block.
func (u *UDPFlow) SetWriteDeadline(time.Time) error { return nil }

// atClose registers fn to run when the flow closes (a relay's host
// socket); if it is closed already, fn runs now.
func (u *UDPFlow) atClose(fn func()) {
	u.mu.Lock()
	if !u.closed {
		u.onClose = append(u.onClose, fn)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	fn()
}

// Close ends the flow: reads fail, later datagrams from the peer start a
// new flow. Idempotent.
func (u *UDPFlow) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	u.queue, u.queued = nil, 0
	fns := u.onClose
	u.onClose = nil
	if u.idle != nil {
		u.idle.Stop()
	}
	u.mu.Unlock()
	u.rdl.Stop()
	u.signal()
	for _, fn := range fns {
		fn()
	}
	f := u.f
	f.mu.Lock()
	if f.udp[u.src] == u {
		delete(f.udp, u.src)
	}
	f.mu.Unlock()
	u.fl.release()
	return nil
}

func (u *UDPFlow) closeAbort() { u.Close() }

var _ net.PacketConn = (*UDPFlow)(nil)

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

// DialUDP opens a UDP socket of the stack connected to dst, a peer behind
// its NICs (a port forward into a namespace, say), as a flow counted
// against the limits and the budget: the stack's own socket
// (stack.Stack.DialUDP), with its error translation and its wait for
// room in the NIC's queue. Up is what Read returns. Errors are
// *net.OpError, carrying a *RefusedError when the Forwarder refused the
// flow itself.
func (f *Forwarder) DialUDP(dst netip.AddrPort) (net.Conn, error) {
	fl, reason, ok := f.open(UDP, netip.AddrPort{}, dst)
	if !ok {
		f.refuse(reason)
		return nil, refusedError("udp", dst, reason)
	}
	c, err := f.st.DialUDP(netip.AddrPort{}, dst)
	if err != nil {
		fl.release()
		return nil, err
	}
	if la, ok := c.LocalAddr().(*net.UDPAddr); ok {
		fl.setSrc(la.AddrPort())
	}
	uc := &udpConn{Conn: c, fl: fl}
	fl.setAbort(nil, func() { c.Close() })
	return uc, nil
}

// udpConn is a dialed UDP flow: the stack's socket, counting datagrams
// into the flow, owning its reservation until Close.
type udpConn struct {
	net.Conn
	fl *flow
}

// Read implements net.Conn.
func (c *udpConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err == nil {
		c.fl.rx.Add(uint64(n))
		c.fl.f.c.udpPktUp.Add(1)
		c.fl.f.c.udpUp.Add(uint64(n))
	}
	return n, err
}

// Write implements net.Conn.
func (c *udpConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.fl.tx.Add(uint64(n))
		c.fl.f.c.udpPktDn.Add(1)
		c.fl.f.c.udpDn.Add(uint64(n))
	}
	return n, err
}

// Close implements net.Conn and ends the flow.
func (c *udpConn) Close() error {
	err := c.Conn.Close()
	c.fl.release()
	return err
}
