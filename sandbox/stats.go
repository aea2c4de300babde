package sandbox

import (
	"net/netip"
	"sync/atomic"

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

// Stats counts what the sandbox relayed and refused. Up is from the
// sandbox, Down to it.
type Stats struct {
	// TCPFlows and UDPFlows are open now; TCPOpened and UDPOpened ever
	// (port forwards included).
	TCPFlows, UDPFlows   int64
	TCPOpened, UDPOpened uint64
	// HalfOpen is TCP connections waiting for their host-side connect.
	HalfOpen int64
	// ConnectFailed counts TCP flows the host could not connect (the
	// sandbox got a reset): not a refusal by policy.
	ConnectFailed uint64
	// TCPResets counts resets carried across, either way.
	TCPResets uint64
	// Bytes and datagrams relayed.
	TCPBytesUp, TCPBytesDown   uint64
	UDPPacketsUp, UDPPacketsDn uint64
	UDPBytesUp, UDPBytesDown   uint64
	// UDPDropped counts datagrams lost in the relay: a host socket's
	// buffer was full, or a datagram from the host did not fit the
	// sandbox's MTU.
	UDPDropped uint64
	// EchoUp and EchoDown count ICMP echo requests relayed to the host
	// and replies relayed back (pings of ustack's own addresses are
	// answered by ustack and not counted here).
	EchoUp, EchoDown uint64
	// DNSQueries counts queries relayed to the upstream resolver (UDP
	// datagrams and TCP connections).
	DNSQueries uint64
	// ForwardConns counts connections (TCP) and mappings (UDP) made by
	// port forwards.
	ForwardConns uint64
	// ForwardFailed counts port-forward connections the sandbox refused.
	ForwardFailed uint64
	// Refused counts refusals by Reason.
	Refused [forward.NumReasons]uint64
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
	return Stats{
		TCPFlows: f.TCPFlows, UDPFlows: f.UDPFlows, TCPOpened: f.TCPOpened, UDPOpened: f.UDPOpened,
		HalfOpen: f.HalfOpen, ConnectFailed: f.ConnectFailed, TCPResets: f.TCPResets,
		TCPBytesUp: f.TCPBytesUp, TCPBytesDown: f.TCPBytesDown,
		UDPPacketsUp: f.UDPPacketsUp, UDPPacketsDn: f.UDPPacketsDn, UDPBytesUp: f.UDPBytesUp, UDPBytesDown: f.UDPBytesDown,
		UDPDropped: f.UDPDropped, EchoUp: f.EchoUp, EchoDown: f.EchoDown, DNSQueries: f.DNSQueries,
		ForwardConns: s.c.fwdConns.Load(), ForwardFailed: s.c.fwdFailed.Load(),
		Refused: f.Refused,
	}
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
