//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/sched"
)

// TestBenchDeviceLinks runs the real `ustack bench` binary on the device
// links (veth, tun and the kernel-to-kernel kveth baseline), both ways,
// every test, on a short window, and checks each row's accounting the way
// the bench's unit tests check the mem link's: what was received was
// sent in the window, loss is a share of what was sent, rr tests have
// ordered latencies and their rate matches their transactions. Never a
// speed.
func TestBenchDeviceLinks(t *testing.T) {
	requireNamespaces(t)
	needPrivilege(t, tunPrivilege, tunProbe())
	bin := buildUstack(t)
	const senders = 2
	for _, reverse := range []bool{false, true} {
		name := "forward"
		if reverse {
			name = "reverse"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"bench", "-json", "-link", "veth,tun,kveth", "-test", "all", "-qdisc", sched.LList,
				"-senders", "2", "-duration", "100ms", "-count", "1"}
			if reverse {
				args = append(args, "-reverse")
			}
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "ustack %s: %s", strings.Join(args, " "), stderr.String())
			var doc struct {
				Results []bench.Result `json:"results"`
			}
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &doc), "ustack bench -json: %s", stdout.String())

			var want []string
			for _, l := range []string{"veth", "tun", "kveth"} {
				q := sched.LList
				if l == "kveth" {
					q = bench.KernelQdisc
				}
				for _, test := range bench.Tests() {
					want = append(want, l+"/"+test+"/"+q)
				}
			}
			var got []string
			for _, r := range doc.Results {
				got = append(got, r.Link+"/"+r.Test+"/"+r.Qdisc)
			}
			require.Equal(t, want, got, "one row per link and test, in the bench's order")

			for _, r := range doc.Results {
				t.Run(r.Link+"/"+r.Test, func(t *testing.T) { checkAccounting(t, r, senders) })
			}
		})
	}
}

// checkAccounting checks one bench row's invariants: the ones that hold
// on every link, whatever the machine's speed.
func checkAccounting(t *testing.T, r bench.Result, senders int) {
	require.Equal(t, senders, r.Senders)
	require.Equal(t, bench.DefaultSize(r.Test), r.Size)
	require.Positive(t, r.DurationS, "the window is measured")
	require.Positive(t, r.SentPPS, "traffic flowed")
	if r.Test == bench.UDPStream {
		// No flow control: a receiver starved on a loaded machine may get
		// nothing in a short window, but never more than was sent in it,
		// and what did not arrive is the loss.
		require.LessOrEqual(t, r.RecvPPS, r.SentPPS, "only datagrams sent in the window are counted")
		require.InDelta(t, 100*(r.SentPPS-r.RecvPPS)/r.SentPPS, r.LossPct, 1e-6, "loss is what was sent and not received")
		require.InDelta(t, r.RecvPPS*float64(r.Size)*8/1e9, r.Gbps, 1e-9, "the rate is the datagrams received")
	} else {
		require.Positive(t, r.RecvPPS, "traffic arrived")
		require.Positive(t, r.Gbps)
	}
	require.GreaterOrEqual(t, r.LossPct, 0.0)
	require.LessOrEqual(t, r.LossPct, 100.0)
	require.Positive(t, r.CPUNsPerOp)
	require.GreaterOrEqual(t, r.AllocsPerOp, 0.0)
	require.GreaterOrEqual(t, r.BytesPerOp, 0.0)
	require.GreaterOrEqual(t, r.VCSW+r.IVCSW, 0.0)
	require.Positive(t, r.PeakRSSMiB, "Linux measures each cell's peak RSS")
	if r.Link == "kveth" {
		require.Equal(t, "-", r.Cache, "kveth has no ustack host to cache in")
	} else {
		require.NotEmpty(t, r.Cache)
	}
	if r.Test == bench.TCPRR || r.Test == bench.UDPRR {
		require.Positive(t, r.TPS)
		require.Positive(t, r.P50us)
		require.LessOrEqual(t, r.P50us, r.P99us)
		require.LessOrEqual(t, r.P99us, r.P999us)
		require.InDelta(t, r.TPS*float64(r.Size)*8/1e9, r.Gbps, 1e-9)
	} else {
		require.Zero(t, r.TPS)
		require.Zero(t, r.P50us)
	}
}
