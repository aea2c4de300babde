package sandbox

import (
	"net/netip"
	"sync/atomic"

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

// counters are what the sandbox counts itself (the relay counts the
// rest).
type counters struct {
	fwdConns, fwdFailed atomic.Uint64
}

// Stats returns the sandbox's counters.
func (s *Sandbox) Stats() Stats {
	var f forward.Stats
	if s.fw != nil {
		f = s.fw.Stats()
	}
	return Stats{Stats: f, PortForwardConns: s.c.fwdConns.Load(), PortForwardFailed: s.c.fwdFailed.Load()}
}

// policy is the relay's policy for the sandbox's configuration: the
// gateways stand for the host's loopback, the DNS addresses relay to
// upstreams (or refuse, with the DNS relay off).
func policy(c *Config, dns [2]netip.AddrPort) *forward.Policy {
	return &forward.Policy{
		Allow:             c.Allow,
		Deny:              c.Deny,
		HostLoopback:      []netip.Addr{c.Gateway4, c.Gateway6},
		AllowHostLoopback: c.AllowHostLoopback,
		DNS:               []forward.DNSRelay{{Addr: c.DNS4, Upstream: dns[0]}, {Addr: c.DNS6, Upstream: dns[1]}},
	}
}
