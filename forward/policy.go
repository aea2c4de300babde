package forward

import "net/netip"

// Policy decides where Relay may take a flow on the far side. The zero
// value is secure: reserved destinations (loopback, link-local, multicast,
// broadcast, unspecified) are refused, everything else is allowed.
type Policy struct {
	// Allow, if not empty, is the set of destinations flows may reach
	// (reserved ones included, if covered); Deny is refused even if Allow
	// covers it. A HostLoopback address is checked both as itself and as
	// the loopback address it stands for: Deny covering either refuses
	// it (a Deny always wins), and with Allow, Allow must cover one of
	// them.
	Allow, Deny []netip.Prefix
	// HostLoopback are addresses that stand for the far side's loopback
	// (a sandbox's gateway): with AllowHostLoopback, flows to them go to
	// 127.0.0.1 or ::1, and replies from loopback come from the first of
	// them of the peer's IP version; without it, they are refused
	// (HostLoopback).
	HostLoopback      []netip.Addr
	AllowHostLoopback bool
	// DNS are DNS relay addresses: flows to port 53 of one go to its
	// upstream, other ports are refused (NoDNS). Where UDP is not
	// carried (NoUDP, or a dialer with no UDP), queries sent to one over
	// UDP still are: to its upstream over TCP, through the dialer.
	DNS []DNSRelay
	// NoUDP refuses UDP (Unsupported), but for DNS queries (see DNS),
	// even where the dialer can carry it. A dialer that cannot (one that
	// neither is a *net.Dialer nor has ListenPacket, as PacketListener)
	// has UDP refused the same way.
	NoUDP bool
}

// DNSRelay is a DNS address a peer may query and the resolver the
// queries go to. An invalid Upstream refuses queries (NoDNS).
type DNSRelay struct {
	Addr     netip.Addr
	Upstream netip.AddrPort
}

var (
	loop4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loop6 = netip.IPv6Loopback()
)

// target maps a flow's destination to where to dial. dns is the DNS relay
// address queried, if it is one.
func (p *Policy) target(dst netip.AddrPort) (to netip.AddrPort, dns netip.Addr, r Reason, ok bool) {
	a := dst.Addr()
	for _, lo := range p.HostLoopback {
		if a != lo {
			continue
		}
		if !p.AllowHostLoopback {
			return to, dns, HostLoopback, false
		}
		l := loopbackOf(a)
		if r, ok := p.allowedLoopback(a, l); !ok {
			return to, dns, r, false
		}
		return netip.AddrPortFrom(l, dst.Port()), dns, 0, true
	}
	for _, d := range p.DNS {
		if a != d.Addr {
			continue
		}
		if dst.Port() != 53 || !d.Upstream.IsValid() {
			return to, a, NoDNS, false
		}
		return d.Upstream, a, 0, true
	}
	if r, ok := p.allowed(a); !ok {
		return to, dns, r, false
	}
	return dst, dns, 0, true
}

// loopbackOf is the far side's loopback address of a's IP version.
func loopbackOf(a netip.Addr) netip.Addr {
	if a.Is6() {
		return loop6
	}
	return loop4
}

// allowedLoopback applies Deny and Allow to a HostLoopback address asked
// for and the loopback address l it stands for: a Deny of either wins;
// with Allow, one of them must be covered. The reserved ranges do not
// apply: AllowHostLoopback asked for loopback.
func (p *Policy) allowedLoopback(asked, l netip.Addr) (Reason, bool) {
	for _, d := range p.Deny {
		if d.Contains(asked) || d.Contains(l) {
			return Denied, false
		}
	}
	if len(p.Allow) == 0 {
		return 0, true
	}
	for _, al := range p.Allow {
		if al.Contains(asked) || al.Contains(l) {
			return 0, true
		}
	}
	return Denied, false
}

// allowed applies Deny, Allow and the reserved ranges to an address.
func (p *Policy) allowed(a netip.Addr) (Reason, bool) {
	for _, d := range p.Deny {
		if d.Contains(a) {
			return Denied, false
		}
	}
	for _, al := range p.Allow {
		if al.Contains(a) {
			return 0, true
		}
	}
	if len(p.Allow) > 0 {
		return Denied, false
	}
	if reserved(a) {
		return Reserved, false
	}
	return 0, true
}

// reserved reports addresses a peer has no business reaching by default:
// the far side's own loopback (reached only through HostLoopback), link-
// local ones (cloud metadata services live at 169.254.169.254),
// multicast, broadcast and unspecified.
func reserved(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() ||
		a.IsInterfaceLocalMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// source maps the far-side address a datagram came from to the address
// the peer sees it from, or says why the peer must not see it. viaDNS is
// the DNS relay address the flow has queried, if any.
func (p *Policy) source(from netip.AddrPort, viaDNS netip.Addr, v6 bool) (netip.AddrPort, Reason, bool) {
	a := from.Addr().Unmap()
	from = netip.AddrPortFrom(a, from.Port())
	if viaDNS.IsValid() {
		for _, d := range p.DNS {
			if d.Addr == viaDNS && from == d.Upstream {
				return netip.AddrPortFrom(d.Addr, 53), 0, true
			}
		}
	}
	if a.IsLoopback() {
		if !p.AllowHostLoopback {
			return from, HostLoopback, false
		}
		for _, lo := range p.HostLoopback {
			if lo.Is6() != v6 {
				continue
			}
			if r, ok := p.allowedLoopback(lo, a); !ok {
				return from, r, false
			}
			return netip.AddrPortFrom(lo, from.Port()), 0, true
		}
		return from, HostLoopback, false
	}
	if r, ok := p.allowed(a); !ok {
		return from, r, false
	}
	return from, 0, true
}
