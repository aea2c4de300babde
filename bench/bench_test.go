package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const tiny = 50 * time.Millisecond

func cfg(test, qdisc string, senders int) Config {
	return Config{Test: test, Link: "mem", Qdisc: qdisc, Senders: senders, Duration: tiny}
}

// TestEveryTestAccounts runs each test briefly and checks the structure
// and the accounting of its result (Result.Check), never its speed, and
// that the cell released every packet buffer (leakcheck.Settled), so
// that a leak names its cell.
func TestEveryTestAccounts(t *testing.T) {
	for _, test := range Tests() {
		for _, q := range sched.Names() {
			t.Run(test+"/"+q, func(t *testing.T) {
				c := cfg(test, q, 3)
				r, c := runAccounted(t, c)
				require.NoError(t, r.Check(c))
				leakcheck.Settled(t)
			})
		}
	}
	// The WireGuard tunnel with ustack behind it, leak-checked here with
	// every qdisc, none included (with none, udp_stream fills wgnet's
	// endpoint queue and gVisor's delegating qdisc drops what it refuses).
	// wg-netstack runs in package wgaccounts, whose tests cannot run the
	// reference check.
	for _, test := range Tests() {
		for _, q := range sched.Names() {
			t.Run(test+"/"+LinkWG+"/"+q, func(t *testing.T) {
				c := cfg(test, q, 3)
				c.Link = LinkWG
				r, c := runAccounted(t, c)
				require.NoError(t, r.Check(c))
				leakcheck.Settled(t)
			})
		}
	}
}

// runAccounted runs c and, if its tiny window saw no traffic at all (or,
// for a TCP test, frames but no payload: a retransmission or an ACK
// alone), once more with a window ten times longer, which it returns with
// the result. On a loaded machine a flow can stall for longer than tiny (a
// retransmission timeout after a drop is 200 ms, a refused UDP writer
// waits up to 100 ms; under -race the tcp_stream cells over mem and wg
// did, now and then): the test checks the accounting, not the speed.
func runAccounted(t *testing.T, c Config) (Result, Config) {
	t.Helper()
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	if r.SentPPS == 0 || (r.Test != UDPStream && r.Gbps == 0) {
		t.Logf("%v: no traffic or no payload in %v (%v pps, %v Gb/s); again with %v", c, c.Duration, r.SentPPS, r.Gbps, 10*c.Duration)
		c.Duration *= 10
		r, err = Run(context.Background(), c)
		require.NoError(t, err)
	}
	return r, c
}

// TestCheckNamesTheInvariant: Check passes a consistent result and names
// each invariant a result can break.
func TestCheckNamesTheInvariant(t *testing.T) {
	stream := cfg(UDPStream, sched.FIFO, 2)
	good := Result{Test: UDPStream, Link: "mem", Qdisc: sched.FIFO, Senders: 2, Size: DefaultSize(UDPStream), Cache: stream.Cache.String(),
		DurationS: 0.05, SentPPS: 1000, RecvPPS: 750, LossPct: 25, CPUNsPerOp: 900, AllocsPerOp: 1, BytesPerOp: 64, VCSW: 3}
	good.Gbps = good.RecvPPS * float64(good.Size) * 8 / 1e9
	if runtime.GOOS == "linux" {
		good.PeakRSSMiB = 20
	}
	require.NoError(t, good.Check(stream))

	rr := cfg(TCPRR, sched.FIFO, 2)
	goodRR := good
	goodRR.Test, goodRR.Size, goodRR.LossPct = TCPRR, DefaultSize(TCPRR), 0
	goodRR.TPS, goodRR.P50us, goodRR.P99us, goodRR.P999us = 500, 10, 20, 20
	goodRR.Gbps = goodRR.TPS * float64(goodRR.Size) * 8 / 1e9
	require.NoError(t, goodRR.Check(rr))

	kveth := Config{Test: UDPStream, Link: "kveth", Qdisc: KernelQdisc, Senders: 2}
	goodKveth := good
	goodKveth.Link, goodKveth.Qdisc, goodKveth.Cache = "kveth", KernelQdisc, "-"
	require.NoError(t, goodKveth.Check(kveth))

	for _, tc := range []struct {
		name string
		c    Config
		r    Result
		mod  func(*Result)
		want string
	}{
		{"another cell", stream, good, func(r *Result) { r.Qdisc = sched.None }, "is not cell"},
		{"senders", stream, good, func(r *Result) { r.Senders = 3 }, "senders 3"},
		{"size", stream, good, func(r *Result) { r.Size = 7 }, "size 7"},
		{"cache", stream, good, func(r *Result) { r.Cache = "" }, "cache"},
		{"kveth cache", kveth, goodKveth, func(r *Result) { r.Cache = "on" }, `want "-"`},
		{"window", stream, good, func(r *Result) { r.DurationS = 0 }, "window"},
		{"nothing sent", stream, good, func(r *Result) { r.SentPPS = 0 }, "no traffic flowed"},
		{"received more than sent", stream, good, func(r *Result) { r.RecvPPS = 2000 }, "more than"},
		{"loss", stream, good, func(r *Result) { r.LossPct = 10 }, "not received"},
		{"udp rate", stream, good, func(r *Result) { r.Gbps *= 2 }, "datagrams received"},
		{"nothing arrived", rr, goodRR, func(r *Result) { r.RecvPPS = 0 }, "no traffic arrived"},
		{"no payload", rr, goodRR, func(r *Result) { r.Gbps = 0 }, "no payload"},
		{"loss share", rr, goodRR, func(r *Result) { r.LossPct = 101 }, "not a share"},
		{"cpu", stream, good, func(r *Result) { r.CPUNsPerOp = 0 }, "CPU"},
		{"negative allocs", stream, good, func(r *Result) { r.AllocsPerOp, r.BytesPerOp = -1, -1 }, "negative allocations"},
		{"allocs without bytes", stream, good, func(r *Result) { r.BytesPerOp = 0 }, "counted together"},
		{"context switches", stream, good, func(r *Result) { r.IVCSW = -1 }, "context switches"},
		{"peak rss", stream, good, func(r *Result) {
			if r.PeakRSSMiB > 0 { // Linux: required
				r.PeakRSSMiB = 0
			} else { // elsewhere: cannot be measured
				r.PeakRSSMiB = 5
			}
		}, "peak RSS"},
		{"no transactions", rr, goodRR, func(r *Result) { r.TPS = 0 }, "no transactions"},
		{"percentiles", rr, goodRR, func(r *Result) { r.P99us = 5 }, "out of order"},
		{"rr rate", rr, goodRR, func(r *Result) { r.Gbps *= 2 }, "transactions make"},
		{"latency on a stream", stream, good, func(r *Result) { r.P50us = 3 }, "stream test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			tc.mod(&r)
			require.ErrorContains(t, r.Check(tc.c), tc.want)
		})
	}
}

func TestLossIsMeasured(t *testing.T) {
	c := cfg(UDPStream, sched.None, 1)
	c.Duration = 200 * time.Millisecond
	c.Impair = link.Impairments{Loss: 0.2, Seed: 5}
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	// 20% injected; a few thousand datagrams make the estimate tight. The
	// receiver's socket buffer may overflow too, so more is possible.
	require.GreaterOrEqual(t, r.LossPct, 15.0)
	require.LessOrEqual(t, r.LossPct, 100.0)

	c.Test = UDPRR
	r, err = Run(context.Background(), c)
	require.NoError(t, err)
	require.Positive(t, r.LossPct, "lost requests or answers time out and are counted")
	require.Positive(t, r.TPS)
}

func TestTCPStreamWithGSO(t *testing.T) {
	c := cfg(TCPStream, sched.None, 2)
	mo := mem.DefaultOptions()
	mo.GSO = true
	c.Mem = &mo
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	bytesPerPacket := r.Gbps * 1e9 / 8 / r.RecvPPS
	require.Greater(t, bytesPerPacket, float64(mem.DefaultMTU), "super-segments on the link")
}

func TestValidate(t *testing.T) {
	good := cfg(TCPRR, sched.FIFO, 1)
	require.NoError(t, good.Validate())
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"test", func(c *Config) { c.Test = "ping" }, "udp_stream"},
		{"link", func(c *Config) { c.Link = "wire" }, "mem"},
		{"qdisc", func(c *Config) { c.Qdisc = "red" }, "fifo"},
		{"senders", func(c *Config) { c.Senders = 0 }, "senders"},
		{"size", func(c *Config) { c.Size = -1 }, "size"},
		{"udp size", func(c *Config) { c.Test = UDPRR; c.Size = 70000 }, "65507"},
		{"duration", func(c *Config) { c.Duration = time.Millisecond }, "duration"},
		{"wg-netstack qdisc", func(c *Config) { c.Link = LinkWGNetstack }, "no qdisc"},
		{"wg reverse", func(c *Config) { c.Link = LinkWG; c.Reverse = true }, "kernel end"},
		{"wg mtu", func(c *Config) { c.Link = LinkWG; c.MTU = 1300 }, "1360"},
		{"wg impair", func(c *Config) { c.Link = LinkWG; c.Impair = link.Impairments{Loss: 0.01} }, "impairments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

func TestRunPlanAlternatesAndTakesMedians(t *testing.T) {
	p := Plan{Tests: []string{UDPRR}, Links: []string{"mem"}, Qdiscs: []string{sched.None, sched.FIFO}, Senders: []int{1, 2}, Duration: 20 * time.Millisecond, Count: 3}
	var order []string
	res, err := RunPlan(context.Background(), p, func(done, total int, c Config) {
		require.Equal(t, 12, total)
		if done < total {
			order = append(order, c.String())
		}
	})
	require.NoError(t, err)
	require.Len(t, res, 4)
	cells := p.Cells()
	// A B C D A B C D A B C D: never the same configuration twice in a row.
	for i, name := range order {
		require.Equal(t, cells[i%len(cells)].String(), name)
	}
	for i, r := range res {
		require.Equal(t, cells[i].Qdisc, r.Qdisc)
		require.Equal(t, cells[i].Senders, r.Senders)
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, cfg(TCPStream, sched.None, 1))
	require.ErrorIs(t, err, context.Canceled)
}

func TestMedian(t *testing.T) {
	rs := []Result{{Test: "x", SentPPS: 3, P99us: 10}, {Test: "x", SentPPS: 1, P99us: 30}, {Test: "x", SentPPS: 2, P99us: 20}}
	m := Median(rs)
	require.Equal(t, "x", m.Test)
	require.Equal(t, 2.0, m.SentPPS)
	require.Equal(t, 20.0, m.P99us)
	m = Median(rs[:2])
	require.Equal(t, 2.0, m.SentPPS, "mean of the middle two")
}

func TestAutoCountKeepsBareRunInBudget(t *testing.T) {
	p := Plan{Tests: []string{UDPStream, TCPRR}, Links: []string{"mem"}, Qdiscs: sched.Names(), Senders: []int{1, 64}, Duration: time.Second}
	require.GreaterOrEqual(t, p.AutoCount(), 1)
	require.LessOrEqual(t, p.Estimate(), Budget+time.Duration(len(p.Cells()))*(p.Duration+cellOverhead(p.Duration)))
	big := p
	big.Qdiscs = append(append([]string{}, sched.Names()...), sched.Names()...)
	big.Tests = Tests()
	require.Equal(t, 1, big.AutoCount(), "a large plan runs once")
}

func TestHistogram(t *testing.T) {
	var h histogram
	require.Zero(t, h.quantile(0.5))
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := q * 1000
		require.InEpsilon(t, want, h.quantile(q), 0.04, "q=%v", q)
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		mid := bucketMid(bucketOf(v))
		require.InEpsilon(t, float64(v)+1, float64(mid)+1, 0.04, "v=%d", v)
	}
	var big histogram
	big.record(time.Duration(math.MaxInt64))
	require.Positive(t, big.quantile(1))
}

func TestOutputs(t *testing.T) {
	rs := []Result{
		{Test: UDPStream, Link: "mem", Qdisc: "none", Senders: 1, Size: 120, RecvPPS: 100, SentPPS: 100},
		{Test: UDPStream, Link: "mem", Qdisc: "fifo", Senders: 1, Size: 120, RecvPPS: 150, SentPPS: 200, LossPct: 25},
		{Test: TCPRR, Link: "mem", Qdisc: "none", Senders: 1, Size: 1, TPS: 10, P50us: 5},
		{Test: TCPRR, Link: "mem", Qdisc: "fifo", Senders: 1, Size: 1, TPS: 5, P50us: 9},
	}
	require.Equal(t, []float64{1, 1.5, 1, 0.5}, Ratio(rs))

	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, rs))
	var doc map[string][]map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	require.Len(t, doc["results"], 4)
	var keys []string
	for k := range doc["results"][0] {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, csvHeader, keys, "JSON fields are exactly the documented ones")

	var cs bytes.Buffer
	require.NoError(t, WriteCSV(&cs, rs))
	rows, err := csv.NewReader(&cs).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 5)
	require.Equal(t, csvHeader, rows[0])

	var tb bytes.Buffer
	require.NoError(t, WriteTable(&tb, rs))
	lines := strings.Split(strings.TrimRight(tb.String(), "\n"), "\n")
	require.Len(t, lines, 5)
	require.Contains(t, lines[2], "1.50x")

	png := filepath.Join(t.TempDir(), "plot.png")
	require.NoError(t, WritePlot(png, rs))
	data, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("\x89PNG")), "a PNG file")
	require.Error(t, WritePlot(png, nil))
}

// TestWGPlan: wg-netstack runs once per test and senders, with no qdisc,
// busy polling or cache setting, and the vs_first column compares wg with
// it.
func TestWGPlan(t *testing.T) {
	p := Plan{Tests: []string{TCPRR}, Links: []string{LinkWGNetstack, LinkWG}, Qdiscs: []string{sched.FIFO, sched.LList},
		Caches: []stack.CacheMode{stack.CacheOff, stack.CacheOn}, Senders: []int{1}, Duration: tiny}
	require.NoError(t, p.Validate())
	var got []string
	for _, c := range p.Cells() {
		got = append(got, c.Link+"/"+c.Qdisc+"/"+c.Cache.String())
	}
	require.Equal(t, []string{"wg-netstack/none/" + stack.CacheDefault.String(), "wg/fifo/off", "wg/fifo/on", "wg/llist/off", "wg/llist/on"}, got)

	rs := []Result{
		{Test: TCPRR, Link: LinkWGNetstack, Qdisc: sched.None, Senders: 1, Size: 1, TPS: 100},
		{Test: TCPRR, Link: LinkWG, Qdisc: sched.LList, Senders: 1, Size: 1, TPS: 150},
		{Test: TCPRR, Link: "mem", Qdisc: sched.LList, Senders: 1, Size: 1, TPS: 400},
	}
	require.Equal(t, []float64{1, 1.5, 1}, Ratio(rs))
}
