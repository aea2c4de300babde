package sandbox

import (
	"net/netip"

	"github.com/ustack-dev/ustack/forward"
)

// Reason says why a flow or datagram was refused: forward's reasons.
type Reason = forward.Reason

// The reasons for refusing, in Stats.Refused (see package forward).
const (
	HostLoopback = forward.HostLoopback
	Denied       = forward.Denied
	Reserved     = forward.Reserved
	FlowLimit    = forward.FlowLimit
	TCPLimit     = forward.TCPLimit
	UDPLimit     = forward.UDPLimit
	HalfOpen     = forward.HalfOpen
	NoDNS        = forward.NoDNS
	Malformed    = forward.Malformed
	HostError    = forward.HostError
	Budget       = forward.Budget
	// Unsupported: UDP or ICMP echo that Config.Proxy does not carry.
	Unsupported = forward.Unsupported
)

// Reasons lists every Reason, for tables and metrics.
func Reasons() []Reason { return forward.Reasons() }

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
