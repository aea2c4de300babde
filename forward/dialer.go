package forward

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"syscall"
)

// This file is how Relay opens its sockets on the far side: every one of
// them as its dialer would, so that a VPN client whose dialer marks its
// sockets (SO_MARK) or binds them to a device or an address keeps its
// relayed UDP and pings out of its own tunnel, as it keeps its TCP.

// controlFunc is the shape of net.Dialer.Control and
// net.ListenConfig.Control.
type controlFunc = func(network, address string, c syscall.RawConn) error

// dialerControl is d's ControlContext bound to ctx, or its Control (as
// net.Dialer uses them: ControlContext wins), or nil.
func dialerControl(ctx context.Context, d *net.Dialer) controlFunc {
	switch {
	case d == nil:
		return nil
	case d.ControlContext != nil:
		return func(network, address string, c syscall.RawConn) error {
			return d.ControlContext(ctx, network, address, c)
		}
	}
	return d.Control
}

// dialerLocalIP is the address of d.LocalAddr (of any kind), or the zero
// Addr. Only the address applies to the sockets Relay listens on: a port
// would be one socket's.
func dialerLocalIP(d *net.Dialer) netip.Addr {
	if d == nil || d.LocalAddr == nil {
		return netip.Addr{}
	}
	var ip net.IP
	switch a := d.LocalAddr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	case *net.IPAddr:
		ip = a.IP
	default:
		return netip.Addr{}
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// listenConfig opens sockets as d dials them: with its Control.
func listenConfig(ctx context.Context, d *net.Dialer) *net.ListenConfig {
	return &net.ListenConfig{Control: dialerControl(ctx, d)}
}

// packetListener is d's way to carry UDP, if it has one: its
// ListenPacket (PacketListener), or the ListenUDPAddrPort or ListenUDP
// method of a userspace network such as wireguard-go's tun/netstack.Net
// or wgnet.Net, whose concrete result types no interface of ours can
// name.
func packetListener(d any) PacketListener {
	if pl, ok := d.(PacketListener); ok {
		return pl
	}
	v := reflect.ValueOf(d)
	if !v.IsValid() {
		return nil
	}
	for _, shape := range []struct {
		name string
		arg  reflect.Type
		addr func(netip.AddrPort) reflect.Value
	}{
		{"ListenUDPAddrPort", reflect.TypeFor[netip.AddrPort](), func(a netip.AddrPort) reflect.Value { return reflect.ValueOf(a) }},
		{"ListenUDP", reflect.TypeFor[*net.UDPAddr](), func(a netip.AddrPort) reflect.Value { return reflect.ValueOf(net.UDPAddrFromAddrPort(a)) }},
	} {
		m := v.MethodByName(shape.name)
		if !m.IsValid() {
			continue
		}
		t := m.Type()
		if t.NumIn() != 1 || t.In(0) != shape.arg || t.NumOut() != 2 ||
			!t.Out(0).Implements(reflect.TypeFor[net.PacketConn]()) || t.Out(1) != reflect.TypeFor[error]() {
			continue
		}
		return &udpListener{name: shape.name, listen: m, addr: shape.addr}
	}
	return nil
}

// udpListener is a PacketListener made of a userspace network's
// ListenUDP-shaped method.
type udpListener struct {
	name   string
	listen reflect.Value
	addr   func(netip.AddrPort) reflect.Value
}

// ListenPacket implements PacketListener: an unspecified address of the
// network's IP version ("udp4" or "udp6"; "udp" is IPv4's), any port.
func (l *udpListener) ListenPacket(_ context.Context, network, address string) (net.PacketConn, error) {
	laddr := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if network == "udp6" {
		laddr = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
	}
	if address != "" {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return nil, fmt.Errorf("forward: %s %q: %w", l.name, address, err)
		}
		laddr = ap
	}
	out := l.listen.Call([]reflect.Value{l.addr(laddr)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	pc, _ := out[0].Interface().(net.PacketConn)
	if pc == nil {
		return nil, fmt.Errorf("forward: %s returned no conn and no error", l.name)
	}
	return pc, nil
}

// PingListener is what a dialer that makes no host sockets (a userspace
// network's: a tunnel's stack) also implements to carry pings for Relay:
// an ICMP echo socket of its network for network "ip4:icmp" or
// "ip6:ipv6-icmp", with the semantics of Linux's ICMP datagram sockets
// and of stack.Stack's echo sockets (ListenPacket "ip4:icmp"): it sets
// the identifier of the echo requests written to it, reads the replies to
// them ICMP header first, and takes and gives its peers as *net.IPAddr.
type PingListener interface {
	ListenPing(ctx context.Context, network string) (net.PacketConn, error)
}
