package sandbox

import (
	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/metrics/family"
)

// The sandbox's metric families; its stack is exported by
// metrics.NewStack(s.Stack()).
var (
	flowsFamily   = &family.Family{Name: "ustack_tun_flows", Help: "Flows relayed now, by protocol.", Labels: []string{"proto"}, Gauge: true}
	openedFamily  = &family.Family{Name: "ustack_tun_flows_opened_total", Help: "Flows ever relayed, by protocol (UDP: NAT mappings).", Labels: []string{"proto"}}
	halfFamily    = &family.Family{Name: "ustack_tun_tcp_half_open", Help: "TCP connections waiting for their host-side connect.", Gauge: true}
	bytesFamily   = &family.Family{Name: "ustack_tun_bytes_total", Help: "Payload bytes relayed, by protocol and direction (up: from the sandbox).", Labels: []string{"proto", "dir"}}
	udpPktFamily  = &family.Family{Name: "ustack_tun_udp_datagrams_total", Help: "UDP datagrams relayed, by direction.", Labels: []string{"dir"}}
	pingFamily    = &family.Family{Name: "ustack_tun_pings_total", Help: "Pings (ICMP echo requests, up, and replies, down) relayed to and from the host.", Labels: []string{"dir"}}
	refusedFamily = &family.Family{Name: "ustack_tun_refused_total", Help: "Flows and datagrams refused, by reason.", Labels: []string{"reason"}}
	eventFamily   = &family.Family{Name: "ustack_tun_events_total", Help: "Other relay events: connect_failed, tcp_resets, udp_dropped, dns_queries, port_forward_conns, port_forward_failed.", Labels: []string{"event"}}
)

// Metrics describes s's counters (Stats) for an exporter, read fresh on
// each export: metrics.NewFunc(s.Metrics()) makes it a Prometheus
// collector, without this package importing Prometheus.
func (s *Sandbox) Metrics() family.Source { return StatsMetrics(s.Stats) }

// StatsMetrics describes the counters stats returns, read fresh on each
// export, as the ustack_tun_* families: a sandbox's (Sandbox.Metrics), or
// those of another relay built on a Forwarder and a PortForwarder
// (ustack wg's).
func StatsMetrics(stats func() Stats) family.Source {
	fams := []*family.Family{flowsFamily, openedFamily, halfFamily, bytesFamily, udpPktFamily, pingFamily, refusedFamily, eventFamily}
	return family.Source{Families: fams, Collect: func(emit family.Emit) {
		st := stats()
		n := func(f *family.Family, v uint64, l ...string) { emit(f, float64(v), l...) }
		emit(flowsFamily, float64(st.TCPFlows), "tcp")
		emit(flowsFamily, float64(st.UDPFlows), "udp")
		emit(halfFamily, float64(st.HalfOpen))
		n(openedFamily, st.TCPOpened, "tcp")
		n(openedFamily, st.UDPOpened, "udp")
		n(bytesFamily, st.TCPBytesUp, "tcp", "up")
		n(bytesFamily, st.TCPBytesDown, "tcp", "down")
		n(bytesFamily, st.UDPBytesUp, "udp", "up")
		n(bytesFamily, st.UDPBytesDown, "udp", "down")
		n(udpPktFamily, st.UDPPacketsUp, "up")
		n(udpPktFamily, st.UDPPacketsDown, "down")
		n(pingFamily, st.PingsUp, "up")
		n(pingFamily, st.PingsDown, "down")
		for _, r := range forward.Reasons() {
			n(refusedFamily, st.Refused[r], r.String())
		}
		for _, e := range []struct {
			name string
			v    uint64
		}{{"connect_failed", st.ConnectFailed}, {"tcp_resets", st.TCPResets}, {"udp_dropped", st.UDPDropped}, {"dns_queries", st.DNSQueries}, {"port_forward_conns", st.PortForwardConns}, {"port_forward_failed", st.PortForwardFailed}} {
			n(eventFamily, e.v, e.name)
		}
	}}
}
