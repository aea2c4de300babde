package sandbox

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a sandbox's counters (Stats) as Prometheus metrics,
// read fresh on each scrape.
type Collector struct{ s *Sandbox }

// NewCollector returns a collector for s.
func NewCollector(s *Sandbox) *Collector { return &Collector{s: s} }

var (
	flowsDesc   = prometheus.NewDesc("ustack_tun_flows", "Flows relayed now, by protocol.", []string{"proto"}, nil)
	openedDesc  = prometheus.NewDesc("ustack_tun_flows_opened_total", "Flows ever relayed, by protocol (UDP: NAT mappings).", []string{"proto"}, nil)
	halfDesc    = prometheus.NewDesc("ustack_tun_tcp_half_open", "TCP connections waiting for their host-side connect.", nil, nil)
	bytesDesc   = prometheus.NewDesc("ustack_tun_bytes_total", "Payload bytes relayed, by protocol and direction (up: from the sandbox).", []string{"proto", "dir"}, nil)
	udpPktDesc  = prometheus.NewDesc("ustack_tun_udp_datagrams_total", "UDP datagrams relayed, by direction.", []string{"dir"}, nil)
	echoDesc    = prometheus.NewDesc("ustack_tun_icmp_echo_total", "ICMP echo requests (up) and replies (down) relayed to and from the host.", []string{"dir"}, nil)
	refusedDesc = prometheus.NewDesc("ustack_tun_refused_total", "Flows and datagrams refused, by reason.", []string{"reason"}, nil)
	eventDesc   = prometheus.NewDesc("ustack_tun_events_total", "Other relay events: connect_failed, tcp_resets, udp_dropped, dns_queries, forward_conns, forward_failed.", []string{"event"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{flowsDesc, openedDesc, halfDesc, bytesDesc, udpPktDesc, echoDesc, refusedDesc, eventDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(flowsDesc, float64(st.TCPFlows), "tcp")
	gauge(flowsDesc, float64(st.UDPFlows), "udp")
	gauge(halfDesc, float64(st.HalfOpen))
	counter(openedDesc, st.TCPOpened, "tcp")
	counter(openedDesc, st.UDPOpened, "udp")
	counter(bytesDesc, st.TCPBytesUp, "tcp", "up")
	counter(bytesDesc, st.TCPBytesDown, "tcp", "down")
	counter(bytesDesc, st.UDPBytesUp, "udp", "up")
	counter(bytesDesc, st.UDPBytesDown, "udp", "down")
	counter(udpPktDesc, st.UDPPacketsUp, "up")
	counter(udpPktDesc, st.UDPPacketsDn, "down")
	counter(echoDesc, st.EchoUp, "up")
	counter(echoDesc, st.EchoDown, "down")
	for _, r := range Reasons() {
		counter(refusedDesc, st.Refused[r], r.String())
	}
	for _, e := range []struct {
		name string
		v    uint64
	}{{"connect_failed", st.ConnectFailed}, {"tcp_resets", st.TCPResets}, {"udp_dropped", st.UDPDropped}, {"dns_queries", st.DNSQueries}, {"forward_conns", st.ForwardConns}, {"forward_failed", st.ForwardFailed}} {
		counter(eventDesc, e.v, e.name)
	}
}
