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
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const tiny = 50 * time.Millisecond

func cfg(test, qdisc string, senders int) Config {
	return Config{Test: test, Link: "mem", Qdisc: qdisc, Senders: senders, Duration: tiny}
}

// TestEveryTestAccounts runs each test briefly and checks the structure
// and the accounting of its result, never its speed.
func TestEveryTestAccounts(t *testing.T) {
	for _, test := range Tests() {
		for _, q := range sched.Names() {
			t.Run(test+"/"+q, func(t *testing.T) {
				c := cfg(test, q, 3)
				r, err := Run(context.Background(), c)
				require.NoError(t, err)
				require.Equal(t, test, r.Test)
				require.Equal(t, "mem", r.Link)
				require.Equal(t, q, r.Qdisc)
				require.Equal(t, 3, r.Senders)
				require.Equal(t, DefaultSize(test), r.Size)
				require.Positive(t, r.DurationS, "the window is measured")
				require.Positive(t, r.SentPPS, "traffic flowed")
				if test != UDPStream {
					// udp_stream has no flow control: behind a queue that
					// drops (fifo), a starved receiver may get nothing.
					require.Positive(t, r.RecvPPS)
					require.Positive(t, r.Gbps)
				}
				if test == UDPStream {
					require.LessOrEqual(t, r.RecvPPS, r.SentPPS, "only datagrams sent in the window are counted")
					require.InDelta(t, 100*(r.SentPPS-r.RecvPPS)/r.SentPPS, r.LossPct, 1e-6, "loss is what was sent and not received")
					require.InDelta(t, r.RecvPPS*float64(r.Size)*8/1e9, r.Gbps, 1e-9, "the rate is the datagrams received")
				}
				require.GreaterOrEqual(t, r.LossPct, 0.0)
				require.LessOrEqual(t, r.LossPct, 100.0)
				require.Positive(t, r.CPUNsPerOp)
				require.GreaterOrEqual(t, r.VCSW+r.IVCSW, 0.0)
				require.Equal(t, r.AllocsPerOp > 0, r.BytesPerOp > 0, "allocations and their bytes are counted together (%v, %v)", r.AllocsPerOp, r.BytesPerOp)
				if runtime.GOOS == "linux" {
					require.Positive(t, r.PeakRSSMiB, "Linux measures each cell's peak RSS")
				} else {
					require.Zero(t, r.PeakRSSMiB, "only Linux can reset the peak per cell")
				}
				rr := test == TCPRR || test == UDPRR
				if rr {
					require.Positive(t, r.TPS)
					require.Positive(t, r.P50us)
					require.LessOrEqual(t, r.P50us, r.P99us)
					require.LessOrEqual(t, r.P99us, r.P999us)
					require.InDelta(t, r.TPS*float64(r.Size)*8/1e9, r.Gbps, 1e-9)
				} else {
					require.Zero(t, r.TPS)
					require.Zero(t, r.P50us)
				}
			})
		}
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
