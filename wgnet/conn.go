package wgnet

import (
	"context"
	"net"
	"net/netip"
)

// TCPConn is a TCP connection through the stack. It is a net.Conn with
// CloseRead and CloseWrite, the methods code written against
// wireguard-go's *gonet.TCPConn uses. Safe for concurrent use as a
// net.Conn is.
type TCPConn struct{ net.Conn }

type halfCloser interface {
	CloseRead() error
	CloseWrite() error
}

// CloseRead shuts down the reading side.
func (c *TCPConn) CloseRead() error { return c.Conn.(halfCloser).CloseRead() }

// CloseWrite shuts down the writing side (sends FIN).
func (c *TCPConn) CloseWrite() error { return c.Conn.(halfCloser).CloseWrite() }

// TCPListener is a TCP listener through the stack; Accept returns
// *TCPConn values as net.Conn.
type TCPListener struct{ net.Listener }

// Accept implements net.Listener.
func (l *TCPListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &TCPConn{c}, nil
}

// packetConn is what the stack's UDP sockets are: both a net.Conn and a
// net.PacketConn.
type packetConn interface {
	net.Conn
	net.PacketConn
}

// UDPConn is a UDP socket through the stack: a net.Conn (Read and Write
// to the connected peer) and a net.PacketConn, as wireguard-go's
// *gonet.UDPConn is.
type UDPConn struct{ packetConn }

// addrPort turns a net.IP and port into a netip.AddrPort; an empty IP
// gives an invalid address with the port kept, as wireguard-go's
// netstack converts them.
func addrPort(ip net.IP, port int) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), uint16(port))
}

// unspecified returns ap with an unspecified address if it has none: a
// listener on [::] takes both IP versions.
func unspecified(ap netip.AddrPort) netip.AddrPort {
	if ap.Addr().IsValid() {
		return ap
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
}

// DialContextTCPAddrPort connects to addr over TCP until ctx ends.
func (n *Net) DialContextTCPAddrPort(ctx context.Context, addr netip.AddrPort) (*TCPConn, error) {
	c, err := n.s.DialTCP(ctx, netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()))
	if err != nil {
		return nil, err
	}
	return &TCPConn{c}, nil
}

// DialContextTCP connects to addr over TCP until ctx ends.
func (n *Net) DialContextTCP(ctx context.Context, addr *net.TCPAddr) (*TCPConn, error) {
	if addr == nil {
		return n.DialContextTCPAddrPort(ctx, netip.AddrPort{})
	}
	return n.DialContextTCPAddrPort(ctx, addrPort(addr.IP, addr.Port))
}

// DialTCPAddrPort connects to addr over TCP.
func (n *Net) DialTCPAddrPort(addr netip.AddrPort) (*TCPConn, error) {
	return n.DialContextTCPAddrPort(context.Background(), addr)
}

// DialTCP connects to addr over TCP.
func (n *Net) DialTCP(addr *net.TCPAddr) (*TCPConn, error) {
	return n.DialContextTCP(context.Background(), addr)
}

// ListenTCPAddrPort listens on addr; an address with no IP listens on
// every local address of both IP versions.
func (n *Net) ListenTCPAddrPort(addr netip.AddrPort) (*TCPListener, error) {
	l, err := n.s.ListenTCP(unspecified(addr))
	if err != nil {
		return nil, err
	}
	return &TCPListener{l}, nil
}

// ListenTCP listens on addr; nil or an address with no IP listens on
// every local address of both IP versions.
func (n *Net) ListenTCP(addr *net.TCPAddr) (*TCPListener, error) {
	if addr == nil {
		return n.ListenTCPAddrPort(netip.AddrPort{})
	}
	return n.ListenTCPAddrPort(addrPort(addr.IP, addr.Port))
}

// DialUDPAddrPort returns a UDP socket bound to laddr (any if it has no
// address) and, if raddr has an address, connected to it.
func (n *Net) DialUDPAddrPort(laddr, raddr netip.AddrPort) (*UDPConn, error) {
	laddr = netip.AddrPortFrom(laddr.Addr().Unmap(), laddr.Port())
	if !raddr.Addr().IsValid() {
		c, err := n.s.ListenUDP(unspecified(laddr))
		if err != nil {
			return nil, err
		}
		return &UDPConn{c.(packetConn)}, nil
	}
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	if !laddr.Addr().IsValid() && laddr.Port() != 0 {
		// A port with no address: the unspecified address of raddr's
		// version.
		a := netip.IPv4Unspecified()
		if raddr.Addr().Is6() {
			a = netip.IPv6Unspecified()
		}
		laddr = netip.AddrPortFrom(a, laddr.Port())
	}
	c, err := n.s.DialUDP(laddr, raddr)
	if err != nil {
		return nil, err
	}
	return &UDPConn{c.(packetConn)}, nil
}

// ListenUDPAddrPort returns an unconnected UDP socket bound to laddr.
func (n *Net) ListenUDPAddrPort(laddr netip.AddrPort) (*UDPConn, error) {
	return n.DialUDPAddrPort(laddr, netip.AddrPort{})
}

// DialUDP is DialUDPAddrPort with net.UDPAddr arguments, either nil.
func (n *Net) DialUDP(laddr, raddr *net.UDPAddr) (*UDPConn, error) {
	var la, ra netip.AddrPort
	if laddr != nil {
		la = addrPort(laddr.IP, laddr.Port)
	}
	if raddr != nil {
		ra = addrPort(raddr.IP, raddr.Port)
	}
	return n.DialUDPAddrPort(la, ra)
}

// ListenUDP returns an unconnected UDP socket bound to laddr (nil: any
// address, any port).
func (n *Net) ListenUDP(laddr *net.UDPAddr) (*UDPConn, error) {
	return n.DialUDP(laddr, nil)
}
