package sandbox

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/metrics"
)

func TestCollector(t *testing.T) {
	s := &Sandbox{pf: &PortForwarder{}}
	s.pf.conns.Add(2)
	s.pf.failed.Add(1)
	c := metrics.NewFunc(s.Metrics())
	// flows 2, half-open 1, opened 2, bytes 4, datagrams 2, echo 2, one
	// refusal series per reason, events 6.
	require.Equal(t, 2+1+2+4+2+2+int(forward.NumReasons)+6, testutil.CollectAndCount(c))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP ustack_tun_events_total Other relay events: connect_failed, tcp_resets, udp_dropped, dns_queries, port_forward_conns, port_forward_failed.
# TYPE ustack_tun_events_total counter
ustack_tun_events_total{event="connect_failed"} 0
ustack_tun_events_total{event="dns_queries"} 0
ustack_tun_events_total{event="port_forward_conns"} 2
ustack_tun_events_total{event="port_forward_failed"} 1
ustack_tun_events_total{event="tcp_resets"} 0
ustack_tun_events_total{event="udp_dropped"} 0
`), "ustack_tun_events_total"))
	require.Equal(t, 1, testutil.CollectAndCount(c, "ustack_tun_tcp_half_open"))
	// Every reason is a label of the refusals, by its metrics name.
	require.Equal(t, int(forward.NumReasons), testutil.CollectAndCount(c, "ustack_tun_refused_total"))
}
