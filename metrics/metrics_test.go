package metrics_test

import (
	"bufio"
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/metrics/family"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// scrape returns the lines of one scrape of m.
func scrape(t *testing.T, m *metrics.Server) []string {
	t.Helper()
	resp, err := http.Get("http://" + m.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	return lines
}

// hasLine reports whether a line of lines starts with prefix.
func hasLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestServeStackAndFunc(t *testing.T) {
	p := stacktest.New(t, &stacktest.Options{Qdisc: sched.LList})
	// Traffic through the qdisc, so that its counters are non-zero.
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 9))
	require.NoError(t, err)
	defer ln.Close()
	c, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 9))
	require.NoError(t, err)
	c.Close()

	hits := &family.Family{Name: "test_hits_total", Help: "Hits.", Labels: []string{"kind"}}
	level := &family.Family{Name: "test_level", Help: "A level.", Gauge: true}
	f := metrics.NewFunc(family.Source{Families: []*family.Family{hits, level}, Collect: func(emit family.Emit) {
		emit(hits, 3, "a")
		emit(level, 1.5)
	}})
	m, err := metrics.Serve("127.0.0.1:0", metrics.NewStack(p.A), f)
	require.NoError(t, err)
	defer m.Close()

	lines := scrape(t, m)
	for _, want := range []string{
		`ustack_gvisor_total{counter="TCP.ActiveConnectionOpenings"} 1`,
		`ustack_link_total{counter="TXPackets",nic="a"}`,
		`ustack_qdisc_total{counter="sent",nic="a",qdisc="llist"}`,
		`ustack_qdisc_lock_contended_total{lock="defer_list",nic="a",qdisc="llist"}`,
		`ustack_qdisc_writepacket_seconds_count{nic="a",qdisc="llist"}`,
		`# TYPE test_hits_total counter`,
		`test_hits_total{kind="a"} 3`,
		`# TYPE test_level gauge`,
		`test_level 1.5`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		require.True(t, hasLine(lines, want), "no line starts with %s", want)
	}
}

func TestServeBadAddress(t *testing.T) {
	_, err := metrics.Serve("127.0.0.1:99999")
	require.ErrorContains(t, err, "metrics on 127.0.0.1:99999")
}

func TestServeDuplicateCollector(t *testing.T) {
	// Two collectors of one family cannot be served together: Serve
	// refuses before it listens.
	fam := &family.Family{Name: "test_dup_total", Help: "Dup."}
	mk := func() metrics.Collector {
		return metrics.NewFunc(family.Source{Families: []*family.Family{fam}, Collect: func(emit family.Emit) { emit(fam, 1) }})
	}
	_, err := metrics.Serve("127.0.0.1:0", mk(), mk())
	require.ErrorContains(t, err, "metrics:")
}
