package wgnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/ustack-dev/ustack/stack"
)

// TCPConn is a TCP connection through the stack: the stack's own conn,
// a net.Conn with CloseRead and CloseWrite, the methods code written
// against wireguard-go's *gonet.TCPConn uses. wgnet hands it out as the
// stack made it, so what the stack's conn offers beyond those methods
// reaches the caller too. Safe for concurrent use as a net.Conn is.
type TCPConn = stack.TCPConn

// UDPConn is a UDP socket through the stack, as the stack made it: a
// net.Conn (Read and Write to the connected peer) and a net.PacketConn,
// as wireguard-go's *gonet.UDPConn is. Safe for concurrent use.
type UDPConn interface {
	net.Conn
	net.PacketConn
}

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
// Errors are the stack's: a *net.OpError whose Err is an errno where one
// matches (errors.Is(err, syscall.ECONNREFUSED) for a refused
// connection).
func (n *Net) DialContextTCPAddrPort(ctx context.Context, addr netip.AddrPort) (TCPConn, error) {
	return n.s.DialTCP(ctx, netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()))
}

// DialContextTCP connects to addr over TCP until ctx ends.
func (n *Net) DialContextTCP(ctx context.Context, addr *net.TCPAddr) (TCPConn, error) {
	if addr == nil {
		return n.DialContextTCPAddrPort(ctx, netip.AddrPort{})
	}
	return n.DialContextTCPAddrPort(ctx, addrPort(addr.IP, addr.Port))
}

// DialTCPAddrPort connects to addr over TCP.
func (n *Net) DialTCPAddrPort(addr netip.AddrPort) (TCPConn, error) {
	return n.DialContextTCPAddrPort(context.Background(), addr)
}

// DialTCP connects to addr over TCP.
func (n *Net) DialTCP(addr *net.TCPAddr) (TCPConn, error) {
	return n.DialContextTCP(context.Background(), addr)
}

// ListenTCPAddrPort listens on addr; an address with no IP listens on
// every local address of both IP versions. The conns it accepts are
// TCPConns.
func (n *Net) ListenTCPAddrPort(addr netip.AddrPort) (net.Listener, error) {
	return n.s.ListenTCP(unspecified(addr))
}

// ListenTCP listens on addr; nil or an address with no IP listens on
// every local address of both IP versions. The conns it accepts are
// TCPConns.
func (n *Net) ListenTCP(addr *net.TCPAddr) (net.Listener, error) {
	if addr == nil {
		return n.ListenTCPAddrPort(netip.AddrPort{})
	}
	return n.ListenTCPAddrPort(addrPort(addr.IP, addr.Port))
}

// DialUDPAddrPort returns a UDP socket bound to laddr (any if it has no
// address) and, if raddr has an address, connected to it.
func (n *Net) DialUDPAddrPort(laddr, raddr netip.AddrPort) (UDPConn, error) {
	laddr = netip.AddrPortFrom(laddr.Addr().Unmap(), laddr.Port())
	if !raddr.Addr().IsValid() {
		c, err := n.s.ListenUDP(unspecified(laddr))
		if err != nil {
			return nil, err
		}
		return bothConn(c)
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
	return bothConn(c)
}

// bothConn returns a datagram socket of the stack (UDP, or ICMP echo) as
// the net.Conn and net.PacketConn it is: the stack returns it as one or
// the other, whichever its call's shape is, and it is always both. It
// closes c if not.
func bothConn(c io.Closer) (UDPConn, error) {
	u, ok := c.(UDPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("wgnet: the stack's socket %T is not both a net.Conn and a net.PacketConn", c)
	}
	return u, nil
}

// ListenUDPAddrPort returns an unconnected UDP socket bound to laddr.
func (n *Net) ListenUDPAddrPort(laddr netip.AddrPort) (UDPConn, error) {
	return n.DialUDPAddrPort(laddr, netip.AddrPort{})
}

// DialUDP is DialUDPAddrPort with net.UDPAddr arguments, either nil.
func (n *Net) DialUDP(laddr, raddr *net.UDPAddr) (UDPConn, error) {
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
func (n *Net) ListenUDP(laddr *net.UDPAddr) (UDPConn, error) {
	return n.DialUDP(laddr, nil)
}
