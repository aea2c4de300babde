package forward

import "sync/atomic"

// Reason says why a flow or datagram was refused.
type Reason int

// The reasons for refusing, in Stats.Refused.
const (
	// HostLoopback: a flow to an address that stands for the host's
	// loopback (Policy.HostLoopback) without Policy.AllowHostLoopback.
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
	// HalfOpen: a TCP handshake found no room under Options.MaxHalfOpen
	// (in all, for its destination or for its peer) within
	// Options.SlowHandshake; see the package doc.
	HalfOpen
	// NoDNS: a flow to a DNS relay address (Policy.DNS) on a port other
	// than 53, or with no upstream.
	NoDNS
	// Malformed: a UDP datagram with a bad length or checksum, or a TCP
	// SYN with RST or FIN set (dropped, as Linux drops it).
	Malformed
	// HostError: the host refused a socket (out of descriptors, no route,
	// an error on send).
	HostError
	// Budget: the flow's buffers would exceed Options.MemoryBudget.
	Budget
	// Unsupported: the relay's dialer cannot carry the protocol (UDP or
	// ICMP through a TCP-only proxy), or Policy.NoUDP.
	Unsupported
	// Rejected: the handler rejected the flow (TCPRequest.Reject).
	Rejected
	// Closing: the Forwarder is shutting down or closed.
	Closing
	// NumReasons is the number of reasons, the length of Stats.Refused.
	NumReasons
)

var reasonNames = [NumReasons]string{"host_loopback", "denied", "reserved", "flow_limit", "tcp_limit", "udp_limit", "half_open", "no_dns", "malformed", "host_error", "budget", "unsupported", "rejected", "closing"}

// String names r as in metrics: "host_loopback", "denied", ...
func (r Reason) String() string {
	if r < 0 || r >= NumReasons {
		return "unknown"
	}
	return reasonNames[r]
}

// Reasons lists every Reason, for tables and metrics.
func Reasons() []Reason {
	rs := make([]Reason, NumReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Stats counts what a Forwarder carried and refused. Up is what the
// stack's peers sent (the side that opened the flow, for forwarded flows),
// Down what was sent to them.
type Stats struct {
	// TCPFlows and UDPFlows are open now (TCP: half-open included);
	// TCPOpened (established: accepted or dialed) and UDPOpened ever.
	TCPFlows, UDPFlows   int64
	TCPOpened, UDPOpened uint64
	// Handshakes is TCP connections their handler has and has not
	// answered yet; HalfOpen those of them counted against
	// Options.MaxHalfOpen (see the package doc), HandshakesWaiting
	// those waiting for room to start.
	Handshakes, HalfOpen, HandshakesWaiting int64
	// MemoryReserved is the buffer memory open flows hold reserved
	// against Options.MemoryBudget.
	MemoryReserved int64
	// ConnectFailed counts TCP flows Relay could not connect upstream
	// (the peer got a reset): not a refusal by policy.
	ConnectFailed uint64
	// TCPResets counts resets Relay carried across, either way.
	TCPResets uint64
	// Bytes and datagrams carried.
	TCPBytesUp, TCPBytesDown     uint64
	UDPPacketsUp, UDPPacketsDown uint64
	UDPBytesUp, UDPBytesDown     uint64
	// UDPDropped counts datagrams lost: a flow's queue or a host socket's
	// buffer was full, a reply did not fit the NIC's MTU, or a DNS query
	// relayed over TCP (Policy.DNS) got no answer.
	UDPDropped uint64
	// PingsUp counts ICMP echo requests Relay sent on (another
	// PingHandler's are not counted), PingsDown replies sent back
	// (PingRequest.Reply).
	PingsUp, PingsDown uint64
	// DNSQueries counts flows and datagrams Relay sent to a DNS upstream
	// (Policy.DNS).
	DNSQueries uint64
	// Refused counts refusals by Reason.
	Refused [NumReasons]uint64
}

// counters are the live, atomic form of Stats.
type counters struct {
	tcpFlows, udpFlows, halfOpen, mem, handshakes    atomic.Int64
	waiting                                          atomic.Int64
	tcpOpened, udpOpened, connectFailed, tcpResets   atomic.Uint64
	tcpUp, tcpDown, udpPktUp, udpPktDn, udpUp, udpDn atomic.Uint64
	dns, udpDropped, pingsUp, pingsDown              atomic.Uint64
	refused                                          [NumReasons]atomic.Uint64
}

func (c *counters) snapshot() Stats {
	s := Stats{
		TCPFlows: c.tcpFlows.Load(), UDPFlows: c.udpFlows.Load(), HalfOpen: c.halfOpen.Load(), Handshakes: c.handshakes.Load(), HandshakesWaiting: c.waiting.Load(), MemoryReserved: c.mem.Load(),
		TCPOpened: c.tcpOpened.Load(), UDPOpened: c.udpOpened.Load(),
		ConnectFailed: c.connectFailed.Load(), TCPResets: c.tcpResets.Load(),
		TCPBytesUp: c.tcpUp.Load(), TCPBytesDown: c.tcpDown.Load(),
		UDPPacketsUp: c.udpPktUp.Load(), UDPPacketsDown: c.udpPktDn.Load(),
		UDPBytesUp: c.udpUp.Load(), UDPBytesDown: c.udpDn.Load(),
		DNSQueries: c.dns.Load(), PingsUp: c.pingsUp.Load(), PingsDown: c.pingsDown.Load(), UDPDropped: c.udpDropped.Load(),
	}
	for i := range s.Refused {
		s.Refused[i] = c.refused[i].Load()
	}
	return s
}
