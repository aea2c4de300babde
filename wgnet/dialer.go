package wgnet

import (
	"context"
	"net"
)

// Dialer is the tunnel's network as a relay's way out: what
// forward.Relay and sandbox.Config.Dialer take, so that the flows a
// sandbox or a relayed network sends leave through the tunnel and never
// through a host socket. TCP goes through DialContext, UDP through
// ListenPacket (forward.PacketListener) and pings through ListenPing
// (forward.PingListener), each a socket of the tunnel's stack. Net
// itself cannot be all three: its ListenPing is wireguard-go's, with
// another signature.
type Dialer struct{ n *Net }

// Dialer returns the tunnel's network as a relay's way out.
func (n *Net) Dialer() *Dialer { return &Dialer{n} }

// DialContext connects through the tunnel, as Net.DialContext does.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return d.n.DialContext(ctx, network, address)
}

// ListenPacket opens a UDP socket of the tunnel's stack on address
// ("udp", "udp4" or "udp6"; "" for any address of the version, IPv4's
// for "udp", any port),
// as stack.Stack.ListenPacket does.
func (d *Dialer) ListenPacket(_ context.Context, network, address string) (net.PacketConn, error) {
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	if address == "" {
		address = "0.0.0.0:0"
		if network == "udp6" {
			address = "[::]:0"
		}
	}
	return d.n.s.ListenPacket(network, address)
}

// ListenPing opens an ICMP echo socket of the tunnel's stack, any
// address of the version: network "ip4:icmp" or "ip6:ipv6-icmp", as
// stack.Stack.ListenPacket gives it (the stack sets the echo
// identifier; replies are read ICMP header first).
func (d *Dialer) ListenPing(_ context.Context, network string) (net.PacketConn, error) {
	if network == "ip6:ipv6-icmp" {
		return d.n.s.ListenPacket(network, "::")
	}
	return d.n.s.ListenPacket(network, "0.0.0.0")
}
