package wgnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// minAttempt is the least time each address of a multi-address TCP dial
// gets before the next is tried, as long as the whole deadline allows
// it: 2 s, the floor of wireguard-go's netstack, Go's net and
// stack.DialContext, so that one address that does not answer does not
// eat the time of the ones after it.
const minAttempt = 2 * time.Second

// errNoSuitableAddress is a name that resolved only to addresses of the
// other IP version than the network asks for.
var errNoSuitableAddress = errors.New("no suitable address found: the name has no address of the network's IP version")

// DialContext connects to address on network ("tcp", "tcp4", "tcp6",
// "udp", "udp4", "udp6", "ping", "ping4", "ping6"; a ping address has no
// port) through the tunnel, as wireguard-go's netstack does: a name is
// resolved with LookupContextHost, and its addresses of the network's IP
// version are tried in that order until one connects or ctx ends, each
// TCP attempt within its share of ctx's deadline (at least minAttempt).
//
// It does not use the stack's own DialContext, which resolves with the
// stack's Resolver: that one answers from the host's /etc/hosts and
// orders addresses by the host's routes, where a tunnel's client expects
// the tunnel's DNS servers and wireguard-go's order (see
// LookupContextHost).
func (n *Net) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if ctx == nil {
		panic("wgnet: DialContext with a nil context")
	}
	proto, version := network, byte(0)
	if l := len(network); l > 0 && (network[l-1] == '4' || network[l-1] == '6') {
		proto, version = network[:l-1], network[l-1]
	}
	if proto != "tcp" && proto != "udp" && proto != "ping" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, port := address, uint16(0)
	if proto != "ping" {
		h, sport, err := net.SplitHostPort(address)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		p, err := strconv.ParseUint(sport, 10, 16)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("port %q: must be a number from 0 to 65535", sport)}
		}
		host, port = h, uint16(p)
	}
	names, err := n.LookupContextHost(ctx, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var addrs []netip.Addr
	for _, s := range names {
		a, err := netip.ParseAddr(s)
		if err == nil && (version == 0 || (version == '4') == a.Is4()) {
			addrs = append(addrs, a.WithZone(""))
		}
	}
	if len(addrs) == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errNoSuitableAddress}
	}
	var first error
	for i, a := range addrs {
		if err := ctx.Err(); err != nil {
			if first == nil {
				first = &net.OpError{Op: "dial", Net: network, Err: err}
			}
			break
		}
		c, err := n.dialOne(ctx, proto, netip.AddrPortFrom(a, port), len(addrs)-i)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// dialOne dials one address, a TCP one within its share of ctx's
// deadline, left addresses (this one included) still to try.
func (n *Net) dialOne(ctx context.Context, proto string, ap netip.AddrPort, left int) (net.Conn, error) {
	switch proto {
	case "udp":
		return n.DialUDPAddrPort(netip.AddrPort{}, ap)
	case "ping":
		pc, err := n.dialPing(ctx, netip.Addr{}, ap.Addr())
		if err != nil {
			return nil, err
		}
		return pc, nil
	}
	if deadline, ok := ctx.Deadline(); ok && left > 1 {
		remaining := time.Until(deadline)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(remaining/time.Duration(left), min(minAttempt, remaining)))
		defer cancel()
	}
	return n.DialContextTCPAddrPort(ctx, ap)
}

// Dial is DialContext without a deadline.
func (n *Net) Dial(network, address string) (net.Conn, error) {
	return n.DialContext(context.Background(), network, address)
}
