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
			results := runBenchJSON(t, bin, args)

			var got []string
			for _, r := range results {
				got = append(got, r.Link+"/"+r.Test+"/"+r.Qdisc)
			}
			require.Equal(t, want, got, "one row per link and test, in the bench's order")

			for i, r := range results {
				t.Run(r.Link+"/"+r.Test, func(t *testing.T) { require.NoError(t, r.Check(cells[i])) })
			}
		})
	}
}

// TestBenchNoOffload runs `ustack bench -offload=false` on the device
// links both ways and checks that no end offloads: every row's payload
// per client-to-server packet fits one MTU-sized segment, the kernel's
// (kveth, and veth's kernel end when it sends) as ustack's, where with
// offloads the kernel's veth sends TCP super-packets of tens of
// kilobytes. Never a speed.
func TestBenchNoOffload(t *testing.T) {
	requireNamespaces(t)
	needPrivilege(t, tunPrivilege, tunProbe())
	bin := buildUstack(t)
	const mtu = 1500
	plan := bench.Plan{Tests: []string{"tcp_stream"}, Links: []string{"kveth", "veth", "tun"}, Qdiscs: []string{sched.FIFO}, Senders: []int{1}, MTU: mtu, NoOffload: true}
	for _, reverse := range []bool{false, true} {
		name := "forward"
		if reverse {
			name = "reverse"
		}
		t.Run(name, func(t *testing.T) {
			plan := plan
			plan.Reverse = reverse
			cells := plan.Cells()
			args := []string{"bench", "-json", "-link", "kveth,veth,tun", "-test", "tcp_stream", "-qdisc", sched.FIFO,
				"-senders", "1", "-duration", "200ms", "-count", "1", "-mtu", strconv.Itoa(mtu), "-offload=false"}
			if reverse {
				args = append(args, "-reverse")
			}
			results := runBenchJSON(t, bin, args)
			require.Len(t, results, len(cells))
			for i, r := range results {
				t.Run(r.Link, func(t *testing.T) {
					require.NoError(t, r.Check(cells[i]))
					require.Positive(t, r.SentPPS, "packets counted")
					// Goodput at the receiver over packets at the sender:
					// two rates of two ends, a few percent apart on a
					// loaded machine, where a super-packet is tens of
					// segments; so the bound is two segments' payload.
					perPacket := r.Gbps * 1e9 / 8 / r.SentPPS
					require.LessOrEqual(t, perPacket, 2*float64(mtu-40), "payload bytes per client-to-server packet: a super-packet left an end")
				})
			}
		})
	}
}

// runBenchJSON runs the ustack binary bin with args, which ask for
// `bench -json`, and returns its rows.
func runBenchJSON(t *testing.T, bin string, args []string) []bench.Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "ustack %s: %s", strings.Join(args, " "), stderr.String())
	var doc struct {
		Results []bench.Result `json:"results"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &doc), "ustack bench -json: %s", stdout.String())
	return doc.Results
}
