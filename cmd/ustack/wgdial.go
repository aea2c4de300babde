package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/ustack-dev/ustack/wgnet"
)

// tunnelDialer dials into the tunnel for ustack wg's client side (the
// proxies and -L): through the wgnet Net, with names resolved by lookup,
// or, where lookup is nil, by the Net itself through the tunnel's DNS
// servers ([Interface] DNS), as a wg-quick client would.
type tunnelDialer struct {
	net    *wgnet.Net
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// resolve returns host's addresses: host itself if it is one.
func (d *tunnelDialer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	if d.lookup != nil {
		return d.lookup(ctx, host)
	}
	names, err := d.net.LookupContextHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, s := range names {
		if a, err := netip.ParseAddr(s); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	return addrs, nil
}

// DialContext connects to address ("host:port") over network ("tcp" or
// "udp") through the tunnel, trying host's addresses in order.
func (d *tunnelDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.lookup == nil {
		return d.net.DialContext(ctx, network, address)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	addrs, err := d.resolve(ctx, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var first error
	for _, a := range addrs {
		c, err := d.net.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s: no address", host)}
	}
	return nil, first
}

// hostLookup resolves names with the resolver at upstream, over host
// sockets: an exit node's client side resolves as its DNS service does
// for its peers (the [Interface] DNS addresses are that service, not
// servers through the tunnel).
func hostLookup(upstream netip.AddrPort) func(ctx context.Context, host string) ([]netip.Addr, error) {
	if !upstream.IsValid() {
		return func(_ context.Context, host string) ([]netip.Addr, error) {
			return nil, &net.DNSError{Err: "no resolver: the host has no nameserver and no -dns-upstream was given", Name: host}
		}
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, upstream.String())
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		addrs, err := r.LookupNetIP(ctx, "ip", host)
		for i, a := range addrs {
			addrs[i] = a.Unmap()
		}
		return addrs, err
	}
}

// errNoAddress is a name that resolved to nothing usable.
var errNoAddress = errors.New("no address")

// resolveOne returns one of host's addresses and port as an address and
// port, for a datagram's destination.
func (d *tunnelDialer) resolveOne(ctx context.Context, host string, port uint16) (netip.AddrPort, error) {
	addrs, err := d.resolve(ctx, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%s: %w", net.JoinHostPort(host, strconv.Itoa(int(port))), errNoAddress)
	}
	return netip.AddrPortFrom(addrs[0], port), nil
}
