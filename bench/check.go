package bench

import (
	"fmt"
	"math"
	"runtime"
)

// Check reports whether r is a consistent result of running cell c in this
// process: that it names c (test, link, qdisc, senders, size, cache) and
// that its numbers agree with one another. These invariants hold on every
// link whatever the machine's speed; Check never judges a speed. It
// returns nil, or an error naming the first invariant r breaks.
//
// It is the one statement of a result's accounting: the bench's own tests
// check the mem link's results with it, and integration's the device
// links'. Where links differ, it says so by link:
//
//   - kveth and wg-netstack have no ustack host, so their cache column
//     is "-"; wg-netstack's qdisc is sched.None (wireguard-go's netstack
//     has none), kveth's KernelQdisc;
//   - on wg and wg-netstack, a TCP test's sent and received packets are
//     those crossing the TUNs (client's read by wireguard-go, server's
//     written by it), counted the same way on both so that they compare;
//     their wire (bindtest's channels) loses nothing on purpose, so a
//     TCP test's loss must be 0 (a packet wireguard-go drops from its
//     queues is TCP's to recover, as on any path);
//   - udp_stream has no flow control on any link: a receiver starved on a
//     loaded machine (or behind a queue that drops) may get nothing in a
//     short window, so only received <= sent is required, with the
//     difference as the loss. Every other test must deliver.
//
// The peak RSS is required where this process can measure it (Linux) and
// must be zero elsewhere, so a result is checked on the OS it ran on.
func (r Result) Check(c Config) error {
	if r.Test != c.Test || r.Link != c.Link || r.Qdisc != c.Qdisc {
		return fmt.Errorf("bench result %s/%s/%s is not cell %s", r.Test, r.Link, r.Qdisc, c)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("bench result %s: %s", c, fmt.Sprintf(format, args...))
	}
	if r.Senders != c.Senders {
		return bad("senders %d, want %d", r.Senders, c.Senders)
	}
	if r.Size != c.size() {
		return bad("size %d, want %d", r.Size, c.size())
	}
	wantCache := c.Cache.String()
	if c.Link == "kveth" || c.Link == LinkWGNetstack {
		wantCache = "-" // no ustack host to cache in
	}
	if r.Cache != wantCache {
		return bad("cache %q, want %q", r.Cache, wantCache)
	}
	if !(r.DurationS > 0) {
		return bad("the window is not measured (duration %v s)", r.DurationS)
	}
	if !(r.SentPPS > 0) {
		return bad("no traffic flowed (sent %v pps)", r.SentPPS)
	}
	if r.Test == UDPStream {
		if r.RecvPPS > r.SentPPS {
			return bad("received %v pps, more than the %v sent: only datagrams sent in the window may be counted", r.RecvPPS, r.SentPPS)
		}
		if loss := 100 * (r.SentPPS - r.RecvPPS) / r.SentPPS; !near(loss, r.LossPct, 1e-6) {
			return bad("loss %v%%, but %v%% of what was sent was not received", r.LossPct, loss)
		}
		if gbps := r.RecvPPS * float64(r.Size) * 8 / 1e9; !near(gbps, r.Gbps, 1e-9) {
			return bad("rate %v Gb/s, but the datagrams received make %v", r.Gbps, gbps)
		}
	} else {
		if !(r.RecvPPS > 0) {
			return bad("no traffic arrived (received %v pps)", r.RecvPPS)
		}
		if !(r.Gbps > 0) {
			return bad("no payload arrived (%v Gb/s)", r.Gbps)
		}
	}
	if isWG(c.Link) && (r.Test == TCPStream || r.Test == TCPRR) && r.LossPct != 0 {
		return bad("loss %v%% on link %s, whose wire loses nothing on purpose", r.LossPct, c.Link)
	}
	if !(r.LossPct >= 0 && r.LossPct <= 100) {
		return bad("loss %v%% is not a share", r.LossPct)
	}
	if !(r.CPUNsPerOp > 0) {
		return bad("no CPU time per operation measured (%v ns)", r.CPUNsPerOp)
	}
	if !(r.AllocsPerOp >= 0 && r.BytesPerOp >= 0) {
		return bad("negative allocations per operation (%v, %v bytes)", r.AllocsPerOp, r.BytesPerOp)
	}
	if (r.AllocsPerOp > 0) != (r.BytesPerOp > 0) {
		return bad("allocations and their bytes are not counted together (%v allocs, %v bytes per op)", r.AllocsPerOp, r.BytesPerOp)
	}
	if !(r.VCSW >= 0 && r.IVCSW >= 0) {
		return bad("negative context switches (%v voluntary, %v involuntary)", r.VCSW, r.IVCSW)
	}
	if runtime.GOOS == "linux" {
		if !(r.PeakRSSMiB > 0) {
			return bad("no peak RSS, which Linux measures for each cell")
		}
	} else if r.PeakRSSMiB != 0 {
		return bad("peak RSS %v MiB, but only Linux can reset the peak per cell", r.PeakRSSMiB)
	}
	if r.Test == TCPRR || r.Test == UDPRR {
		if !(r.TPS > 0) {
			return bad("no transactions completed")
		}
		if !(r.P50us > 0 && r.P50us <= r.P99us && r.P99us <= r.P999us) {
			return bad("latency percentiles out of order or missing (p50 %v, p99 %v, p99.9 %v us)", r.P50us, r.P99us, r.P999us)
		}
		if gbps := r.TPS * float64(r.Size) * 8 / 1e9; !near(gbps, r.Gbps, 1e-9) {
			return bad("rate %v Gb/s, but the transactions make %v", r.Gbps, gbps)
		}
	} else if r.TPS != 0 || r.P50us != 0 {
		return bad("transactions (%v/s) or latencies (p50 %v us) on a stream test", r.TPS, r.P50us)
	}
	return nil
}

// near reports whether a and b differ by at most delta.
func near(a, b, delta float64) bool { return math.Abs(a-b) <= delta }
