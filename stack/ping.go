package stack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// parseICMPNetwork recognises "ip4:..." and "ip6:..." networks. ok says
// the network is one of those; err, that its protocol is not ICMP echo.
func parseICMPNetwork(network string) (v6, ok bool, err error) {
	ipv, proto, found := strings.Cut(network, ":")
	if !found || (ipv != "ip" && ipv != "ip4" && ipv != "ip6") {
		return false, false, nil
	}
	switch {
	case ipv == "ip4" && (proto == "icmp" || proto == "1"):
		return false, true, nil
	case ipv == "ip6" && (proto == "ipv6-icmp" || proto == "58"):
		return true, true, nil
	}
	return false, true, fmt.Errorf("IP network %q: the stack offers ICMP echo only, as ip4:icmp or ip6:ipv6-icmp", network)
}

func icmpFamily(v6 bool) family {
	if v6 {
		return v6Only
	}
	return v4Only
}

// listenPing opens an ICMP echo socket bound to host (no port; "" for
// any address).
func (s *Stack) listenPing(network, host string, v6 bool) (*pingConn, error) {
	a, err := s.localAddr(context.Background(), icmpFamily(v6), host)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	c, err := s.newPing(network, v6)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: &net.IPAddr{IP: a.AsSlice()}, Err: err}
	}
	if terr := c.ep.Bind(fullAddress(netip.AddrPortFrom(a, 0))); terr != nil {
		c.Close()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: &net.IPAddr{IP: a.AsSlice()}, Err: TranslateError(terr)}
	}
	return c, nil
}

// dialPing opens an ICMP echo socket connected to host (no port): it
// sends to and reads replies from host only.
func (s *Stack) dialPing(ctx context.Context, network, host string, v6 bool) (*pingConn, error) {
	if host == "" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errMissingAddress}
	}
	addrs, err := s.lookup(ctx, icmpFamily(v6), host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	dst := &net.IPAddr{IP: addrs[0].AsSlice()}
	c, err := s.newPing(network, v6)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: dst, Err: err}
	}
	if terr := c.ep.Connect(tcpip.FullAddress{Addr: toTCPIP(addrs[0])}); terr != nil {
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Addr: dst, Err: TranslateError(terr)}
	}
	c.raddr = dst
	return c, nil
}

func (s *Stack) newPing(network string, v6 bool) (*pingConn, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	proto, netProto := icmp.ProtocolNumber4, protocolOf(netip.IPv4Unspecified())
	if v6 {
		proto, netProto = icmp.ProtocolNumber6, protocolOf(netip.IPv6Unspecified())
	}
	wq := new(waiter.Queue)
	ep, terr := s.s.NewEndpoint(proto, netProto, wq)
	if terr != nil {
		return nil, TranslateError(terr)
	}
	c := &pingConn{v6: v6}
	c.init(network, ep, wq, nil, s.cache)
	return c, nil
}

// pingConn is an ICMP echo socket: gVisor's ping endpoint (Linux's
// SOCK_DGRAM IPPROTO_ICMP) as a net.PacketConn, and as a net.Conn when
// dialed. It is safe for concurrent use.
type pingConn struct {
	sock
	v6    bool
	raddr *net.IPAddr // the peer of a dialed conn; nil if listening
}

var (
	_ net.PacketConn = (*pingConn)(nil)
	_ net.Conn       = (*pingConn)(nil)
)

func (c *pingConn) opError(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: c.network, Source: c.LocalAddr(), Addr: addr, Err: err}
}

// ReadFrom implements net.PacketConn: it reads one ICMP message (header
// first) into b, truncated to len(b), and returns its source.
func (c *pingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	res, err := c.read(b, tcpip.ReadOptions{NeedRemoteAddr: true})
	if err != nil {
		return 0, nil, c.opError("read", nil, err)
	}
	return res.Count, &net.IPAddr{IP: res.RemoteAddr.Addr.AsSlice()}, nil
}

// Read implements net.Conn.
func (c *pingConn) Read(b []byte) (int, error) {
	n, _, err := c.ReadFrom(b)
	return n, err
}

// WriteTo implements net.PacketConn: b is an echo request, header
// first, and addr a *net.IPAddr of the socket's IP version.
func (c *pingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ia, ok := addr.(*net.IPAddr)
	if !ok || ia == nil {
		return 0, c.opError("write", addr, fmt.Errorf("destination %v is a %T: want a *net.IPAddr", addr, addr))
	}
	a, ok := netip.AddrFromSlice(ia.IP)
	if a = a.Unmap(); !ok || a.Is6() != c.v6 {
		return 0, c.opError("write", addr, fmt.Errorf("destination %v is not an IPv%s address", addr, icmpFamily(c.v6).version()))
	}
	to := tcpip.FullAddress{Addr: toTCPIP(a)}
	return c.send(b, &to, addr)
}

// Write implements net.Conn, for a dialed conn.
func (c *pingConn) Write(b []byte) (int, error) {
	if c.raddr == nil {
		return 0, c.opError("write", nil, fmt.Errorf("not connected: use WriteTo, or dial the %s destination", c.network))
	}
	return c.send(b, nil, c.raddr)
}

func (c *pingConn) send(b []byte, to *tcpip.FullAddress, addr net.Addr) (int, error) {
	n, err := c.write(b, to, false)
	if err != nil {
		return n, c.opError("write", addr, err)
	}
	return n, nil
}

// Close implements net.Conn; it wakes reads and writes in progress.
func (c *pingConn) Close() error {
	c.close()
	return nil
}

// LocalAddr implements net.Conn: the bound address (the identifier the
// stack chose is not part of it).
func (c *pingConn) LocalAddr() net.Addr {
	if a, err := c.ep.GetLocalAddress(); err == nil && a.Addr.Len() > 0 {
		return &net.IPAddr{IP: a.Addr.AsSlice()}
	}
	if c.v6 {
		return &net.IPAddr{IP: net.IPv6unspecified}
	}
	return &net.IPAddr{IP: net.IPv4zero}
}

// RemoteAddr implements net.Conn: the peer of a dialed conn, else nil.
func (c *pingConn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil
	}
	return c.raddr
}
