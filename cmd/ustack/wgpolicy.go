package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// wgTunnel is what a configuration file says about the tunnel's
// addresses: this endpoint's own, its DNS service's, and what its peers
// are allowed.
type wgTunnel struct {
	addrs  []netip.Addr   // this endpoint's own ([Interface] Address)
	ifaces []netip.Prefix // their prefixes, masked
	dns    []netip.Addr   // [Interface] DNS
	peers  []netip.Prefix // every peer's AllowedIPs, masked
}

func newWGTunnel(c *wgconf.Config) *wgTunnel {
	t := &wgTunnel{dns: c.Interface.DNS}
	for _, p := range c.Interface.Addresses {
		t.addrs = append(t.addrs, p.Addr().Unmap())
		t.ifaces = append(t.ifaces, p.Masked())
	}
	for _, p := range c.Peers {
		for _, a := range p.AllowedIPs {
			t.peers = append(t.peers, a.Masked())
		}
	}
	return t
}

// own reports whether a is one of this endpoint's addresses.
func (t *wgTunnel) own(a netip.Addr) bool { return slices.Contains(t.addrs, a.Unmap()) }

// routed checks that the tunnel carries flows to to ("host:port"): an
// address is not this endpoint's own and some peer's AllowedIPs cover
// it. A name is for the tunnel's DNS to answer when a flow comes.
func (t *wgTunnel) routed(to string) error {
	host, _, err := net.SplitHostPort(to)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if t.own(a) {
		return fmt.Errorf("%v is this endpoint's own address ([Interface] Address), not a peer's", a)
	}
	for _, p := range t.peers {
		if p.Contains(a) {
			return nil
		}
	}
	return fmt.Errorf("no peer's AllowedIPs covers %v, so the tunnel would not carry it", a)
}

// policy is the relay's policy for an exit node: this endpoint's own
// addresses stand for the host's loopback (as a sandbox's gateway does),
// unless they are DNS addresses too; the DNS addresses relay to
// upstream, by their IP version; and the tunnel's own ranges (the
// interface's prefixes and the peers' AllowedIPs, but for default
// routes) are denied, so that a flow to an address in the tunnel that is
// not this endpoint's never leaves through the host's network: peers do
// not reach each other through the relay.
func (t *wgTunnel) policy(s *wgSpec) *forward.Policy {
	p := &forward.Policy{
		Allow:             s.Allow,
		Deny:              slices.Clone(s.Deny),
		AllowHostLoopback: s.AllowHostLoopback,
	}
	for _, a := range t.addrs {
		if !slices.Contains(t.dns, a) {
			p.HostLoopback = append(p.HostLoopback, a)
		}
	}
	for _, a := range t.dns {
		up := s.DNSUpstream[0]
		if a.Is6() {
			up = s.DNSUpstream[1]
		}
		p.DNS = append(p.DNS, forward.DNSRelay{Addr: a, Upstream: up})
	}
	var tunnel []netip.Prefix
	for _, pf := range append(slices.Clone(t.ifaces), t.peers...) {
		if pf.Bits() > 0 {
			tunnel = append(tunnel, pf)
		}
	}
	p.Deny = append(p.Deny, subtractAddrs(tunnel, append(slices.Clone(t.addrs), t.dns...))...)
	return p
}

// subtractAddrs returns prefixes covering what ps cover but the holes:
// each prefix holding a hole is split in halves down to the hole, the
// half without it kept (at most one prefix per bit of the address).
func subtractAddrs(ps []netip.Prefix, holes []netip.Addr) []netip.Prefix {
	out := slices.Clone(ps)
	for _, h := range holes {
		var next []netip.Prefix
		for _, p := range out {
			next = append(next, subtractAddr(p, h)...)
		}
		out = next
	}
	return out
}

// subtractAddr returns p less the address a.
func subtractAddr(p netip.Prefix, a netip.Addr) []netip.Prefix {
	if !p.Contains(a) {
		return []netip.Prefix{p}
	}
	var out []netip.Prefix
	for bits := p.Bits() + 1; bits <= a.BitLen(); bits++ {
		// The half of the prefix of a's first bits-1 bits that a is not in.
		b := a.AsSlice()
		i := bits - 1
		b[i/8] ^= 0x80 >> (i % 8)
		other, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(other, bits).Masked())
	}
	return out
}
