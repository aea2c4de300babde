package sandbox

import (
	"net/netip"
	"sync/atomic"
)

// Reason says why a flow or datagram was refused.
type Reason int

// The reasons for refusing, in Stats.Refused.
const (
	// HostLoopback: the sandbox dialed the gateway without
	// AllowHostLoopback.
	HostLoopback Reason = iota
	// Denied: the destination is in a Deny prefix, or outside every Allow
	// prefix when there are some.
	Denied
	// Reserved: link-local, multicast, broadcast, unspecified or loopback
	// destinations, which no Allow prefix covers.
	Reserved
	// FlowLimit, TCPLimit, UDPLimit: a limit on flows at once was reached.
	FlowLimit
	TCPLimit
	UDPLimit
	// HalfOpen: too many TCP connections were waiting for their host-side
	// connect, to one destination (a quarter of MaxHalfOpen) or in all
	// (gVisor's forwarder then ignores the SYN).
	HalfOpen
	// NoDNS: a DNS query while the DNS relay is off or has no upstream.
	NoDNS
	// Malformed: a UDP datagram with a bad length or checksum.
	Malformed
	// HostError: the host refused a socket (out of descriptors, no route,
	// an error on send).
	HostError
	numReasons
)

var reasonNames = [numReasons]string{"host_loopback", "denied", "reserved", "flow_limit", "tcp_limit", "udp_limit", "half_open", "no_dns", "malformed", "host_error"}

// String names r as in metrics: "host_loopback", "denied", ...
func (r Reason) String() string {
	if r < 0 || r >= numReasons {
		return "unknown"
	}
	return reasonNames[r]
}

// Reasons lists every Reason, for tables and metrics.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Stats counts what the sandbox relayed and refused.
type Stats struct {
	// TCPFlows and UDPFlows are open now; TCPOpened and UDPOpened ever.
	TCPFlows, UDPFlows   int64
	TCPOpened, UDPOpened uint64
	// HalfOpen is TCP connections waiting for their host-side connect.
	HalfOpen int64
	// ConnectFailed counts TCP flows the host could not connect (the
	// sandbox got a reset): not a refusal by policy.
	ConnectFailed uint64
	// TCPResets counts resets carried across, either way.
	TCPResets uint64
	// Bytes and datagrams relayed, Up from the sandbox and Down to it.
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
	Refused [numReasons]uint64
}

// counters are the live, atomic form of Stats.
type counters struct {
	tcpFlows, udpFlows, halfOpen                     atomic.Int64
	tcpOpened, udpOpened, connectFailed, tcpResets   atomic.Uint64
	tcpUp, tcpDown, udpPktUp, udpPktDn, udpUp, udpDn atomic.Uint64
	dns, fwdConns, fwdFailed, udpDropped             atomic.Uint64
	echoUp, echoDown                                 atomic.Uint64
	refused                                          [numReasons]atomic.Uint64
}

func (c *counters) snapshot() Stats {
	s := Stats{
		TCPFlows: c.tcpFlows.Load(), UDPFlows: c.udpFlows.Load(), HalfOpen: c.halfOpen.Load(),
		TCPOpened: c.tcpOpened.Load(), UDPOpened: c.udpOpened.Load(),
		ConnectFailed: c.connectFailed.Load(), TCPResets: c.tcpResets.Load(),
		TCPBytesUp: c.tcpUp.Load(), TCPBytesDown: c.tcpDown.Load(),
		UDPPacketsUp: c.udpPktUp.Load(), UDPPacketsDn: c.udpPktDn.Load(),
		UDPBytesUp: c.udpUp.Load(), UDPBytesDown: c.udpDn.Load(),
		DNSQueries: c.dns.Load(), EchoUp: c.echoUp.Load(), EchoDown: c.echoDown.Load(), UDPDropped: c.udpDropped.Load(), ForwardConns: c.fwdConns.Load(), ForwardFailed: c.fwdFailed.Load(),
	}
	for i := range s.Refused {
		s.Refused[i] = c.refused[i].Load()
	}
	return s
}

// policy decides where a flow from the sandbox goes on the host.
type policy struct {
	cfg Config
	dns [2]netip.AddrPort // upstream for DNS4 and DNS6; invalid if none
}

var (
	loop4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loop6 = netip.IPv6Loopback()
)

// target maps the destination a sandbox flow asked for to the host address
// to connect to. dns reports a query to ustack's DNS address.
func (p *policy) target(dst netip.AddrPort) (to netip.AddrPort, dns bool, r Reason, ok bool) {
	a := dst.Addr()
	switch a {
	case p.cfg.Gateway4, p.cfg.Gateway6:
		if !p.cfg.AllowHostLoopback {
			return to, false, HostLoopback, false
		}
		lo := loop4
		if a.Is6() {
			lo = loop6
		}
		return netip.AddrPortFrom(lo, dst.Port()), false, 0, true
	case p.cfg.DNS4, p.cfg.DNS6:
		up := p.dns[0]
		if a.Is6() {
			up = p.dns[1]
		}
		if dst.Port() != 53 || !up.IsValid() {
			return to, true, NoDNS, false
		}
		return up, true, 0, true
	}
	if r, ok := p.allowed(a); !ok {
		return to, false, r, false
	}
	return dst, false, 0, true
}

// allowed applies Deny, Allow and the reserved ranges to a host address.
func (p *policy) allowed(a netip.Addr) (Reason, bool) {
	for _, d := range p.cfg.Deny {
		if d.Contains(a) {
			return Denied, false
		}
	}
	for _, al := range p.cfg.Allow {
		if al.Contains(a) {
			return 0, true
		}
	}
	if len(p.cfg.Allow) > 0 {
		return Denied, false
	}
	if reserved(a) {
		return Reserved, false
	}
	return 0, true
}

// reserved reports addresses a sandbox has no business reaching on the
// host's networks by default: the host's own loopback (reached only through
// the gateway), link-local ones (cloud metadata services live at
// 169.254.169.254), multicast, broadcast and unspecified.
func reserved(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() ||
		a.IsInterfaceLocalMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// source maps the host-side address a datagram came from to the address the
// sandbox sees it from, or reports that the sandbox must not see it.
// viaDNS says whether the mapping has sent DNS queries.
func (p *policy) source(from netip.AddrPort, viaDNS bool, v6 bool) (netip.AddrPort, bool) {
	a := from.Addr().Unmap()
	from = netip.AddrPortFrom(a, from.Port())
	if viaDNS {
		up := p.dns[0]
		dnsAddr := p.cfg.DNS4
		if v6 {
			up, dnsAddr = p.dns[1], p.cfg.DNS6
		}
		if from == up {
			return netip.AddrPortFrom(dnsAddr, 53), true
		}
	}
	if a.IsLoopback() {
		if !p.cfg.AllowHostLoopback {
			return from, false
		}
		gw := p.cfg.Gateway4
		if v6 {
			gw = p.cfg.Gateway6
		}
		return netip.AddrPortFrom(gw, from.Port()), true
	}
	if _, ok := p.allowed(a); !ok {
		return from, false
	}
	return from, true
}
