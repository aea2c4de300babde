package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/sched"
)

func TestBenchCache(t *testing.T) {
	code, out, errs := runCmd("bench", "-json", "-test", "tcp_rr", "-qdisc", "none", "-senders", "1", "-cache", "off,on",
		"-duration", "50ms", "-count", "1")
	require.Equal(t, 0, code, errs)
	var doc struct {
		Results []struct {
			Cache      string  `json:"cache"`
			TPS        float64 `json:"tps"`
			PeakRSSMiB float64 `json:"peak_rss_mib"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Results, 2)
	require.Equal(t, "off", doc.Results[0].Cache)
	require.Equal(t, "on", doc.Results[1].Cache)
	for _, r := range doc.Results {
		require.Positive(t, r.TPS)
		if runtime.GOOS == "linux" {
			require.Positive(t, r.PeakRSSMiB, "Linux measures each cell's peak RSS")
		} else {
			require.Zero(t, r.PeakRSSMiB, "only Linux can reset the peak per cell")
		}
	}

	code, out, _ = runCmd("bench", "-test", "tcp_rr", "-qdisc", "none", "-senders", "1", "-cache", "on,off", "-duration", "20ms", "-count", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "cache")
	require.Contains(t, out, "rss_MiB")

	for _, bad := range []string{"maybe", ""} {
		code, _, errs = runCmd("bench", "-cache", bad)
		require.Equal(t, 2, code, bad)
		require.Contains(t, errs, "-cache", bad)
	}
}

// bareBench runs the quick start's bare `ustack bench` once per test
// binary, with the measured window cut to the minimum and one run per
// cell: its rows and header are the bare run's, only its numbers are not.
var bareBench = sync.OnceValues(func() (string, error) {
	code, out, errs := runCmd("bench", "-duration", "10ms", "-count", "1")
	if code != 0 {
		return "", fmt.Errorf("ustack bench exited %d: %s", code, errs)
	}
	return out, nil
})

// TestBareBenchRows: the quick start prints a header and exactly one row
// per test (udp_stream, tcp_rr), sender count (1, 64) and registered
// qdisc, as the README says.
func TestBareBenchRows(t *testing.T) {
	out, err := bareBench()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	var want, got []string
	for _, test := range []string{bench.UDPStream, bench.TCPRR} {
		for _, senders := range []string{"1", "64"} {
			for _, q := range sched.Names() {
				want = append(want, strings.Join([]string{test, "mem", q, senders}, " "))
			}
		}
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 4, "row %q", l)
		got = append(got, strings.Join(f[:4], " "))
	}
	require.ElementsMatch(t, want, got, "one row per test, sender count and registered qdisc (%d)", len(sched.Names()))
}

// tableHeadPrefix starts every bench table header in the docs: a line
// whose fields begin so is a copy of what `ustack bench` prints.
var tableHeadPrefix = []string{"test", "link", "qdisc", "senders"}

// TestDocsTableHeaders: every bench table header in README.md and
// docs/results.md (a line whose fields start with tableHeadPrefix) is,
// field by field, the header a bare `ustack bench` prints, and the README
// shows at least one: a reader compares their run against those tables.
func TestDocsTableHeaders(t *testing.T) {
	out, err := bareBench()
	require.NoError(t, err)
	head, _, _ := strings.Cut(out, "\n")
	want := strings.Fields(head)
	require.Equal(t, tableHeadPrefix, want[:len(tableHeadPrefix)], "the bare run's header")
	root := filepath.Join("..", "..")
	for _, doc := range []struct {
		path     string
		optional bool
	}{{"README.md", false}, {filepath.Join("docs", "results.md"), true}} {
		data, err := os.ReadFile(filepath.Join(root, doc.path))
		require.NoError(t, err)
		headers := 0
		for i, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < len(tableHeadPrefix) || !slices.Equal(f[:len(tableHeadPrefix)], tableHeadPrefix) {
				continue
			}
			headers++
			require.Equal(t, want, f, "%s:%d: a bench table header must be what `ustack bench` prints", doc.path, i+1)
		}
		if !doc.optional {
			require.Positive(t, headers, "%s shows no bench table (no line starts with %q)", doc.path, strings.Join(tableHeadPrefix, " "))
		}
	}
}

// TestReadmeGoVersion: the README names the Go version go.mod requires,
// since gVisor links against the runtime of the Go it was built for and
// an older toolchain fails in ways that do not name the cause.
func TestReadmeGoVersion(t *testing.T) {
	root := filepath.Join("..", "..")
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	var version string
	for _, line := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			version = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, version, "go.mod has no go directive")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "Go "+version+" or newer", "README.md must name go.mod's Go version (%s)", version)
}

// TestBenchWG: -link takes the WireGuard links, which run unprivileged,
// and wg-netstack, the baseline, runs once with no qdisc and no cache
// setting.
func TestBenchWG(t *testing.T) {
	// wg-netstack is left to bench/wgaccounts: wireguard-go's netstack
	// never releases the packet buffers it injects, which this package's
	// reference leak check would report.
	r := benchOne(t, "-link", "wg", "-test", "tcp_rr", "-qdisc", "llist", "-senders", "1", "-duration", "20ms", "-count", "1")
	require.Equal(t, []string{bench.LinkWG, sched.LList}, []string{r.Link, r.Qdisc})
	require.Positive(t, r.TPS, r.Link)

	code, _, errs := runCmd("bench", "-link", "wg", "-reverse")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "kernel end")
}

// TestBenchProfiles: -cpuprofile and -trace write their files for a run,
// and a profile file that cannot be created fails the command, naming the
// flag.
func TestBenchProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "trace.out")
	code, _, errs := runCmd("bench", "-link", "mem", "-test", "tcp_rr", "-senders", "1", "-qdisc", "none", "-count", "1", "-duration", "50ms", "-procs", "1", "-cpuprofile", cpu, "-trace", tr)
	require.Equal(t, 0, code, errs)
	for _, f := range []string{cpu, tr} {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.NotZero(t, fi.Size(), f)
	}
	bad := filepath.Join(dir, "no", "such", "dir", "cpu.pprof")
	code, _, errs = runCmd("bench", "-link", "mem", "-test", "tcp_rr", "-senders", "1", "-qdisc", "none", "-count", "1", "-duration", "50ms", "-cpuprofile", bad)
	require.Equal(t, 1, code)
	require.Contains(t, errs, "-cpuprofile")
	code, _, errs = runCmd("bench", "-procs", "-1")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "-procs")
}

// TestBenchDelayedACK: -delayed-ack=false gives the ustack hosts gVisor's
// stock ACKs, a pure ACK for every answer, so tcp_rr's client sends more
// packets per transaction than with the delayed ACK, whose answers carry
// their ACK.
func TestBenchDelayedACK(t *testing.T) {
	perTransaction := func(args ...string) float64 {
		t.Helper()
		r := benchOne(t, append([]string{"-link", "mem", "-test", "tcp_rr", "-senders", "1", "-qdisc", "none", "-count", "1", "-duration", "300ms"}, args...)...)
		require.Positive(t, r.TPS)
		return r.SentPPS / r.TPS
	}
	on, off := perTransaction(), perTransaction("-delayed-ack=false")
	t.Logf("client packets per transaction: delayed ACK %.2f, stock %.2f", on, off)
	require.Less(t, on, off, "client packets per transaction: delayed ACK %.2f, stock %.2f", on, off)
}

// TestBenchQdiscHandOff: -qdisc-handoff reaches both hosts' qdiscs, whose
// packets then all go through the background goroutine (none bypasses);
// without it an idle qdisc's packets bypass.
func TestBenchQdiscHandOff(t *testing.T) {
	counts := func(args ...string) (bypassed, handedOff uint64) {
		t.Helper()
		r := benchOne(t, append([]string{"-link", "mem", "-test", "tcp_rr", "-senders", "1", "-qdisc", "rootlock", "-count", "1", "-duration", "200ms"}, args...)...)
		require.Positive(t, r.TPS)
		require.NotNil(t, r.Contention, "our qdiscs report their counters")
		for _, s := range []*sched.Stats{r.Contention.Client, r.Contention.Server} {
			require.NotNil(t, s)
			require.Positive(t, s.Sent)
			bypassed += s.Bypassed
			handedOff += s.HandedOff
		}
		return bypassed, handedOff
	}
	b, h := counts()
	require.Positive(t, b)
	require.Zero(t, h)
	b, h = counts("-qdisc-handoff")
	require.Zero(t, b)
	require.Positive(t, h)
}

// benchOne runs `ustack bench -json` with args, which must make one cell,
// and returns that cell's result.
func benchOne(t *testing.T, args ...string) bench.Result {
	t.Helper()
	code, out, errs := runCmd(append([]string{"bench", "-json"}, args...)...)
	require.Equal(t, 0, code, errs)
	var doc struct {
		Results []bench.Result `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Len(t, doc.Results, 1)
	return doc.Results[0]
}
