//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/sched"
)

// TestBenchDeviceLinks runs the real `ustack bench` binary on the device
// links (veth, tun and the kernel-to-kernel kveth baseline), both ways,
// every test, on a short window, and checks each row's accounting with
// bench's own Result.Check, as the bench's unit tests check the mem
// link's: what was received was sent in the window, loss is a share of
// what was sent, rr tests have ordered latencies and their rate matches
// their transactions. Never a speed.
func TestBenchDeviceLinks(t *testing.T) {
	requireNamespaces(t)
	needPrivilege(t, tunPrivilege, tunProbe())
	bin := buildUstack(t)
	const senders = 2
	// The plan the command line below asks for: its cells are the rows
	// expected, in order, each with the configuration to check it against.
	plan := bench.Plan{Tests: bench.Tests(), Links: []string{"veth", "tun", "kveth"}, Qdiscs: []string{sched.LList}, Senders: []int{senders}}
	cells := plan.Cells()
	var want []string
	for _, c := range cells {
		want = append(want, c.Link+"/"+c.Test+"/"+c.Qdisc)
	}
	for _, reverse := range []bool{false, true} {
		name := "forward"
		if reverse {
			name = "reverse"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"bench", "-json", "-link", "veth,tun,kveth", "-test", "all", "-qdisc", sched.LList,
				"-senders", strconv.Itoa(senders), "-duration", "100ms", "-count", "1"}
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

			var got []string
			for _, r := range doc.Results {
				got = append(got, r.Link+"/"+r.Test+"/"+r.Qdisc)
			}
			require.Equal(t, want, got, "one row per link and test, in the bench's order")

			for i, r := range doc.Results {
				t.Run(r.Link+"/"+r.Test, func(t *testing.T) { require.NoError(t, r.Check(cells[i])) })
			}
		})
	}
}
