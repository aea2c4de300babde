package sandbox

import (
	"net/netip"

	"github.com/ustack-dev/ustack/forward"
)

// Stats counts what the sandbox relayed and refused: its relay's counters
// (forward.Stats; Up is from the sandbox, Down to it) and its port
// forwards'.
type Stats struct {
	forward.Stats
	// PortForwardConns counts connections (TCP) and mappings (UDP) made by
	// port forwards.
	PortForwardConns uint64
	// PortForwardFailed counts port-forward connections the sandbox refused.
	PortForwardFailed uint64
}

// Stats returns the sandbox's counters.
func (s *Sandbox) Stats() Stats {
	var f forward.Stats
	if s.fw != nil {
		f = s.fw.Stats()
	}
	conns, failed := s.pf.Counts()
	return Stats{Stats: f, PortForwardConns: conns, PortForwardFailed: failed}
}

// policy is the relay's policy for the sandbox's configuration: the
// host loopback addresses (the gateways by default) stand for the host's
// loopback, the DNS addresses relay to upstreams (or refuse, with the
// DNS relay off); an unspecified one of either is none.
func policy(c *Config, dns [2]netip.AddrPort) *forward.Policy {
	p := &forward.Policy{Allow: c.Allow, Deny: c.Deny, AllowHostLoopback: c.AllowHostLoopback}
	for _, a := range []netip.Addr{c.HostLoopback4, c.HostLoopback6} {
		if a.IsValid() && !a.IsUnspecified() && !(a.Is6() && c.NoIPv6) {
			p.HostLoopback = append(p.HostLoopback, a)
		}
	}
	for i, a := range []netip.Addr{c.DNS4, c.DNS6} {
		if a.IsValid() && !a.IsUnspecified() && !(a.Is6() && c.NoIPv6) {
			p.DNS = append(p.DNS, forward.DNSRelay{Addr: a, Upstream: dns[i]})
		}
	}
	return p
}
