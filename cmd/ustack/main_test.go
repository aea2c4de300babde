package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/sched"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestBadFlagsExit2WithChoices(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "-qdisc", "red"}, "none, fifo, rootlock, busylock, enqlock, llist"},
		{[]string{"bench", "-qdisc-limit", "0"}, "-qdisc-limit"},
		{[]string{"bench", "-test", "ping"}, "udp_stream, tcp_stream, tcp_rr, udp_rr"},
		{[]string{"bench", "-link", "wire"}, "valid choices are mem, veth, tun, kveth"},
		{[]string{"bench", "-size", "-5"}, "size"},
		{[]string{"bench", "-size", "70000", "-test", "udp_rr"}, "65507"},
		{[]string{"bench", "-duration", "soon"}, "duration"},
		{[]string{"bench", "-duration", "1ms"}, "at least 10ms"},
		{[]string{"bench", "-senders", "0"}, "-senders"},
		{[]string{"bench", "-senders", "a,b"}, "-senders"},
		{[]string{"bench", "-count", "-1"}, "-count"},
		{[]string{"bench", "-mem-tx-cost", "slow"}, "CALL,PACKET"},
		{[]string{"bench", "-impair", "loss=200%"}, "loss"},
		{[]string{"bench", "-mtu", "100"}, "-mtu 100: must be from 1280 to 65520"},
		{[]string{"bench", "-mtu", "-1"}, "-mtu -1: must be from 1280 to 65520"},
		{[]string{"bench", "-json", "-csv"}, "choose one"},
		{[]string{"bench", "extra"}, "unexpected argument"},
		{[]string{"frobnicate"}, "valid commands are bench, serve, tun"},
		{[]string{"tun"}, "nothing to run"},
		{[]string{"tun", "-netns", "/x", "-pid", "1"}, "not both"},
		{[]string{"tun", "-addr", "10.0.0.1", "--", "true"}, "-addr"},
		{[]string{"tun", "-gw", "10.0.0.1", "--", "true"}, "gateway 10.0.0.1"},
		{[]string{"tun", "-p", "80", "--", "true"}, "-p"},
		{[]string{"tun", "-deny", "nope", "--", "true"}, "-deny"},
		{[]string{"tun", "-qdisc", "red", "--", "true"}, "valid names"},
		{[]string{"tun", "-dns-upstream", "x:y", "--", "true"}, "-dns-upstream"},
		{[]string{"tun", "-proxy", "socks4://127.0.0.1:1080", "--", "true"}, "proxy URL socks4://127.0.0.1:1080: scheme \"socks4\" not supported: use socks5:// or http://; want socks5://[user:pass@]HOST:PORT or http://"},
		{[]string{"tun", "-proxy", "socks5://127.0.0.1", "--", "true"}, "proxy URL socks5://127.0.0.1: want HOST:PORT"},
		{[]string{"tun", "-proxy", "http://u:pw@h:x", "--", "true"}, "proxy URL: invalid port"},
		{[]string{"tun", "-proxy", "socks5://127.0.0.1:1080", "-proxy-udp", "maybe", "--", "true"}, `-proxy-udp "maybe": want refuse or direct`},
		{[]string{"tun", "-proxy-udp", "direct", "--", "true"}, "UDP direct past a proxy, without a proxy"},
		{[]string{"tun", "-procs", "-1", "--", "true"}, "-procs -1: want a count of CPUs"},
		{[]string{"tun", "-mtu", "100", "--", "true"}, "MTU 100: must be from 1280 to 65520"},
		{[]string{"tun", "-mtu", "65535", "--", "true"}, "MTU 65535: must be from 1280 to 65520"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-mtu", "100"}, "-mtu 100: must be from 1280 to 65520"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-mtu", "65521"}, "-mtu 65521: must be from 1280 to 65520"},
		{[]string{"serve"}, "-link is required"},
		{[]string{"serve", "-link", "carrier-pigeon:1", "-addr", "198.18.0.2/24"}, "afpacket:IFACE or tun:NAME"},
		{[]string{"serve", "-link", "tun:x"}, "-addr"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2"}, "-addr"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-gw", "nope"}, "-gw"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-qdisc", "red"}, "valid names"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-echo", "70000"}, "at most 65535"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-impair", "loss=2"}, "-impair"},
		{[]string{"serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-queues", "0"}, "-queues"},
		{[]string{"serve", "extra"}, "unexpected argument"},
		{[]string{"bench", "-link", "veth", "-reverse", "-test", "nope"}, "valid choices"},
		{[]string{"bench", "-link", "mem", "-reverse"}, "reverse needs a kernel end"},
		{nil, "Usage"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(tc.args...)
			require.Equal(t, 2, code)
			require.Empty(t, out)
			require.Contains(t, errs, tc.want)
		})
	}
}

// TestCheckMTU: one bound for -mtu on every command, 0 meaning the link's
// default.
func TestCheckMTU(t *testing.T) {
	for _, tc := range []struct {
		mtu int
		ok  bool
	}{{0, true}, {1, false}, {1279, false}, {1280, true}, {1500, true}, {9000, true}, {65520, true}, {65521, false}, {65535, false}, {-1, false}} {
		err := checkMTU(tc.mtu)
		if tc.ok {
			require.NoError(t, err, "-mtu %d", tc.mtu)
			continue
		}
		require.EqualError(t, err, fmt.Sprintf("-mtu %d: must be from 1280 to 65520, or 0 for the link's default", tc.mtu))
		uerr := checkMTU(uint(max(tc.mtu, 0)))
		require.Equal(t, tc.mtu < 0, uerr == nil, "the unsigned flags of serve and tun get the same bound (%d)", tc.mtu)
	}
}

func TestHelp(t *testing.T) {
	code, _, errs := runCmd("bench", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, errs, "-mem-tx-cost")
	code, out, _ := runCmd("help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "ustack bench")
	require.Contains(t, out, "ustack serve")
	code, _, errs = runCmd("serve", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, errs, "-metrics")
}

func TestBenchJSON(t *testing.T) {
	png := filepath.Join(t.TempDir(), "rate.png")
	code, out, errs := runCmd("bench", "-json", "-test", "udp_rr,tcp_stream", "-qdisc", "all", "-senders", "1,2",
		"-duration", "20ms", "-count", "1", "-mem-tx-cost", "1us,10ns", "-plot", png)
	require.Equal(t, 0, code, errs)
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Equal(t, 2*2*len(sched.Names()), len(doc.Results), "a row per test, qdisc and sender count")
	require.Equal(t, "udp_rr", doc.Results[0]["test"])
	require.Equal(t, "none", doc.Results[0]["qdisc"], "the baseline comes first")
	require.FileExists(t, png)
	for _, r := range doc.Results {
		_, has := r["contention"]
		require.Equal(t, r["qdisc"] != "none" && r["qdisc"] != "fifo", has, "ours carry a contention profile, gVisor's keep none")
	}
}

func TestBenchContention(t *testing.T) {
	// udp_rr rather than udp_stream: a stream's window can open behind a
	// warm-up backlog that a slow (race-instrumented, loaded) machine has
	// not drained yet, so the window may offer nothing to profile.
	code, out, errs := runCmd("bench", "-test", "udp_rr", "-qdisc", "none,llist", "-senders", "4", "-duration", "50ms", "-count", "1", "-contention")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "client qdisc (llist)")
	require.Contains(t, out, "defer_list")
	require.Contains(t, out, "@writepacket_ns:")
	require.NotContains(t, out, "(none)")
}

func TestBenchTableAndCSV(t *testing.T) {
	code, out, errs := runCmd("bench", "-test", "tcp_rr", "-qdisc", "none", "-senders", "1", "-duration", "20ms", "-count", "1")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "tcp_rr")
	require.Contains(t, out, "p99_us")
	code, out, errs = runCmd("bench", "-csv", "-test", "udp_stream", "-qdisc", "fifo", "-senders", "2", "-duration", "20ms", "-count", "1")
	require.Equal(t, 0, code, errs)
	require.True(t, strings.HasPrefix(out, "test,link,qdisc,senders"))
}

func TestBenchBusyPoll(t *testing.T) {
	code, out, errs := runCmd("bench", "-json", "-test", "udp_rr", "-qdisc", "none", "-senders", "1", "-busypoll", "off,adaptive",
		"-duration", "50ms", "-count", "1")
	require.Equal(t, 0, code, errs)
	var doc struct {
		Results []struct {
			BusyPoll      string `json:"busypoll"`
			BusyPollStats *struct {
				Client *struct {
					Mode  string `json:"mode"`
					Waits uint64 `json:"waits"`
				} `json:"client"`
			} `json:"busypoll_stats"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Results, 2)
	require.Equal(t, "off", doc.Results[0].BusyPoll)
	require.Nil(t, doc.Results[0].BusyPollStats, "off keeps no busy polling counters")
	require.Equal(t, "adaptive", doc.Results[1].BusyPoll)
	require.NotNil(t, doc.Results[1].BusyPollStats)
	require.Equal(t, "adaptive", doc.Results[1].BusyPollStats.Client.Mode)
	require.Positive(t, doc.Results[1].BusyPollStats.Client.Waits)

	code, out, _ = runCmd("bench", "-test", "udp_rr", "-qdisc", "none", "-senders", "1", "-busypoll", "on:20", "-duration", "20ms", "-count", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "busypoll")
	require.Contains(t, out, "runnable_exits")

	for _, bad := range []string{"fast", "on:0", "spin:x", ""} {
		code, _, errs = runCmd("bench", "-busypoll", bad)
		require.Equal(t, 2, code, bad)
		require.Contains(t, errs, "-busypoll", bad)
	}
	code, _, errs = runCmd("serve", "-link", "tun:x", "-addr", "198.18.0.2/24", "-busypoll", "sometimes")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "valid modes are off")
}

// FuzzFlagLists: the command's list parsers never panic, and what they
// accept is what the input named: valid prefixes, counts in range, known
// names, without duplicates.
func FuzzFlagLists(f *testing.F) {
	for _, s := range []string{"198.18.0.2/24,fd00::2/64", "1,64", "all", "none,llist", "", ",", " 1 , 2 ", "10.0.0.1/33", "0,1", "-5", "busylock,busylock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ps, err := parsePrefixes(s); err == nil {
			for _, p := range ps {
				// IPv6 hex digits may be either case; the prefix prints them
				// in lower case.
				if !p.IsValid() || !strings.Contains(strings.ToLower(s), p.Addr().String()[:1]) {
					t.Fatalf("parsePrefixes(%q) gave %v", s, p)
				}
			}
		}
		if ns, err := parseInts(s); err == nil {
			if len(ns) == 0 {
				t.Fatalf("parseInts(%q) accepted no count", s)
			}
			seen := map[int]bool{}
			for _, n := range ns {
				if n < 1 || n > bench.MaxSessions || seen[n] {
					t.Fatalf("parseInts(%q) gave %v", s, ns)
				}
				seen[n] = true
			}
		}
		if names, err := parseList(s, sched.Names(), "qdisc"); err == nil {
			seen := map[string]bool{}
			for _, n := range names {
				if !sched.Known(n) || seen[n] {
					t.Fatalf("parseList(%q) gave %v", s, names)
				}
				seen[n] = true
			}
		}
	})
}

// TestTunProxyURLHidesPassword: a bad -proxy URL is refused before
// anything is created, and the message does not repeat its password.
func TestTunProxyURLHidesPassword(t *testing.T) {
	code, out, errs := runCmd("tun", "-proxy", "socks5://bob:s3cret@127.0.0.1:x", "--", "true")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errs, "proxy URL")
	require.NotContains(t, errs, "s3cret")
}
