package wgnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// PingAddr is the address of a ping socket: an IP address whose network
// is "ping4" or "ping6". It is wireguard-go netstack's PingAddr.
type PingAddr struct{ addr netip.Addr }

// PingAddrFromAddr returns the PingAddr of addr.
func PingAddrFromAddr(addr netip.Addr) *PingAddr { return &PingAddr{addr} }

// String implements net.Addr.
func (a PingAddr) String() string { return a.addr.String() }

// Network implements net.Addr.
func (a PingAddr) Network() string {
	switch {
	case a.addr.Is4():
		return "ping4"
	case a.addr.Is6():
		return "ping6"
	}
	return "ping"
}

// Addr returns the IP address.
func (a PingAddr) Addr() netip.Addr { return a.addr }

// PingConn is an ICMP echo socket through the stack (an unprivileged
// ping socket, as Linux's SOCK_DGRAM IPPROTO_ICMP): what it writes is an
// echo request whose identifier and checksum the stack fills in, and
// what it reads are the echo replies addressed to it. It is the stack's
// ICMP echo socket (stack.ListenPacket's "ip4:icmp" and
// "ip6:ipv6-icmp") with wireguard-go's addresses: its deadlines, errors
// and Close are the stack's. It is a net.Conn and a net.PacketConn, safe
// for concurrent use.
type PingConn struct {
	sock         UDPConn // the stack's ICMP echo socket; UDPConn is its shape
	laddr, raddr PingAddr
	// filter is set when the socket was bound to an address and then
	// given a peer: the stack's socket is then unconnected (the stack
	// binds or connects one, not both), so Write sends to raddr and
	// reads skip what did not come from it, as a connected socket's
	// would.
	filter bool
}

var (
	_ net.Conn       = (*PingConn)(nil)
	_ net.PacketConn = (*PingConn)(nil)
)

// icmpNetwork is the stack's network name of an ICMP echo socket of IPv6
// if v6, else of IPv4.
func icmpNetwork(v6 bool) string {
	if v6 {
		return "ip6:ipv6-icmp"
	}
	return "ip4:icmp"
}

// DialPingAddr returns a ping socket bound to laddr (if valid) and
// connected to raddr (if valid); at least one must be.
func (n *Net) DialPingAddr(laddr, raddr netip.Addr) (*PingConn, error) {
	return n.dialPing(context.Background(), laddr, raddr)
}

func (n *Net) dialPing(ctx context.Context, laddr, raddr netip.Addr) (*PingConn, error) {
	laddr, raddr = laddr.Unmap(), raddr.Unmap()
	if !laddr.IsValid() && !raddr.IsValid() {
		return nil, errors.New("wgnet: ping dial: give a local or a remote address")
	}
	if laddr.IsValid() && raddr.IsValid() && laddr.Is4() != raddr.Is4() {
		return nil, fmt.Errorf("wgnet: ping dial: %v and %v are of different IP versions", laddr, raddr)
	}
	v6 := laddr.Is6() || raddr.Is6()
	network := icmpNetwork(v6)
	pc := &PingConn{laddr: PingAddr{laddr}, raddr: PingAddr{raddr}}
	if !laddr.IsValid() {
		pc.laddr.addr = netip.IPv4Unspecified()
		if v6 {
			pc.laddr.addr = netip.IPv6Unspecified()
		}
		c, err := n.s.DialContext(ctx, network, raddr.String())
		if err != nil {
			return nil, err
		}
		return pc.attach(c)
	}
	c, err := n.s.ListenPacket(network, laddr.String())
	if err != nil {
		return nil, err
	}
	pc.filter = raddr.IsValid()
	return pc.attach(c)
}

// attach makes the stack's socket c pc's.
func (pc *PingConn) attach(c io.Closer) (*PingConn, error) {
	sock, err := bothConn(c)
	if err != nil {
		return nil, err
	}
	pc.sock = sock
	return pc, nil
}

// ListenPingAddr returns an unconnected ping socket bound to laddr.
func (n *Net) ListenPingAddr(laddr netip.Addr) (*PingConn, error) {
	return n.DialPingAddr(laddr, netip.Addr{})
}

// DialPing is DialPingAddr with *PingAddr arguments, either nil.
func (n *Net) DialPing(laddr, raddr *PingAddr) (*PingConn, error) {
	var la, ra netip.Addr
	if laddr != nil {
		la = laddr.addr
	}
	if raddr != nil {
		ra = raddr.addr
	}
	return n.DialPingAddr(la, ra)
}

// ListenPing is ListenPingAddr with a *PingAddr (nil is not allowed: a
// ping socket needs an IP version).
func (n *Net) ListenPing(laddr *PingAddr) (*PingConn, error) {
	var la netip.Addr
	if laddr != nil {
		la = laddr.addr
	}
	return n.ListenPingAddr(la)
}

// LocalAddr implements net.Conn: the address the socket was bound to,
// or the unspecified address of its IP version.
func (pc *PingConn) LocalAddr() net.Addr { return pc.laddr }

// RemoteAddr implements net.Conn: the address it was dialed to, or the
// zero PingAddr.
func (pc *PingConn) RemoteAddr() net.Addr { return pc.raddr }

// Close implements net.Conn; it wakes reads and writes in progress.
func (pc *PingConn) Close() error { return pc.sock.Close() }

// SetDeadline implements net.Conn.
func (pc *PingConn) SetDeadline(t time.Time) error { return pc.sock.SetDeadline(t) }

// SetReadDeadline implements net.Conn.
func (pc *PingConn) SetReadDeadline(t time.Time) error { return pc.sock.SetReadDeadline(t) }

// SetWriteDeadline implements net.Conn: a write waits for room in the
// device's queue until then.
func (pc *PingConn) SetWriteDeadline(t time.Time) error { return pc.sock.SetWriteDeadline(t) }

// WriteTo implements net.PacketConn: p is an ICMP echo request sent to
// addr, a *PingAddr, PingAddr or *net.IPAddr of the socket's IP version.
func (pc *PingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	var ip net.IP
	switch v := addr.(type) {
	case *PingAddr:
		ip = v.addr.AsSlice()
	case PingAddr:
		ip = v.addr.AsSlice()
	case *net.IPAddr:
		ip = v.IP
	default:
		return 0, &net.OpError{Op: "write", Net: pc.laddr.Network(), Source: pc.laddr, Addr: addr,
			Err: fmt.Errorf("address of type %T: use a *PingAddr or *net.IPAddr", addr)}
	}
	return pc.sock.WriteTo(p, &net.IPAddr{IP: ip})
}

// Write implements net.Conn: it sends p to the address the socket was
// dialed to.
func (pc *PingConn) Write(p []byte) (int, error) {
	if pc.filter {
		return pc.WriteTo(p, pc.raddr)
	}
	return pc.sock.Write(p)
}

// ReadFrom implements net.PacketConn: it waits for an echo reply, until
// the read deadline or Close, and returns its source as a *PingAddr.
func (pc *PingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, from, err := pc.sock.ReadFrom(p)
		if err != nil {
			return n, nil, err
		}
		var src netip.Addr
		if ia, ok := from.(*net.IPAddr); ok {
			src, _ = netip.AddrFromSlice(ia.IP)
			src = src.Unmap()
		}
		if pc.filter && src != pc.raddr.addr {
			continue
		}
		return n, &PingAddr{src}, nil
	}
}

// Read implements net.Conn.
func (pc *PingConn) Read(p []byte) (int, error) {
	n, _, err := pc.ReadFrom(p)
	return n, err
}
