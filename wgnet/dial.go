package wgnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
)

// errNoSuitableAddress is a name that resolved only to addresses of the
// other IP version than the network asks for.
var errNoSuitableAddress = errors.New("no suitable address found: the name has no address of the network's IP version")

// DialContext connects to address on network ("tcp", "tcp4", "tcp6",
// "udp", "udp4", "udp6", "ping", "ping4", "ping6"; a ping address has no
// port) through the tunnel, as wireguard-go's netstack does: a name is
// resolved with LookupContextHost, and its addresses of the network's IP
// version are tried in that order until one connects or ctx ends, each
// TCP attempt within its share of ctx's deadline. TCP and UDP go through
// the stack's own DialContext, whose name lookup is LookupContextHost
// (stack.Options.Lookup), not the stack's Resolver: that one answers from
// the host's /etc/hosts and orders addresses by the host's routes, where
// a tunnel's client expects the tunnel's DNS servers and wireguard-go's
// order.
func (n *Net) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if ctx == nil {
		panic("wgnet: DialContext with a nil context")
	}
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		return n.s.DialContext(ctx, network, address)
	case "ping", "ping4", "ping6":
	default:
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	// A ping "connects" at once, to the first address of the version.
	addrs, err := n.lookupNetIP(ctx, "ip"+strings.TrimPrefix(network, "ping"), address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	return n.dialPing(ctx, netip.Addr{}, addrs[0])
}

// lookupNetIP resolves host as LookupContextHost does, to the addresses
// of network's IP version ("ip", "ip4", "ip6"), in its order: the
// stack's name lookup (stack.Options.Lookup).
func (n *Net) lookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	names, err := n.LookupContextHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, s := range names {
		a, err := netip.ParseAddr(s)
		if err == nil && (network == "ip" || (network == "ip4") == a.Is4()) {
			addrs = append(addrs, a.WithZone(""))
		}
	}
	if len(addrs) == 0 {
		return nil, errNoSuitableAddress
	}
	return addrs, nil
}

// Dial is DialContext without a deadline.
func (n *Net) Dial(network, address string) (net.Conn, error) {
	return n.DialContext(context.Background(), network, address)
}
