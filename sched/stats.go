package sched

import (
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Stats is a snapshot of one discipline's counters. At a quiescent point
// (no WritePacket in progress) they conserve:
//
//	Offered  = Enqueued + Refused.Total()
//	Enqueued = Sent + Dropped.Total() + Backlog
type Stats struct {
	// Strategy is the discipline's registered name.
	Strategy string `json:"strategy"`
	// Offered counts packets handed to WritePacket.
	Offered uint64 `json:"offered"`
	// Enqueued counts packets the discipline accepted: queued, deferred on
	// llist's list, or sent at once (Bypassed).
	Enqueued uint64 `json:"enqueued"`
	// Bypassed counts accepted packets sent directly because the queue was
	// empty and nobody was running it.
	Bypassed uint64 `json:"bypassed"`
	// Sent and Bytes count what the link took.
	Sent  uint64 `json:"sent"`
	Bytes uint64 `json:"bytes"`
	// Batches counts WritePackets calls: Sent/Batches is the mean batch.
	Batches uint64 `json:"batches"`
	// Requeued counts packets the link refused (full) and that went back to
	// the head of the queue.
	Requeued uint64 `json:"requeued"`
	// Refused counts packets WritePacket returned an error for: never
	// accepted, the caller was told.
	Refused Drops `json:"refused"`
	// Dropped counts accepted packets that were then dropped.
	Dropped Drops `json:"dropped"`
	// Backlog is the queue length now.
	Backlog int `json:"backlog"`
	// QuotaHandoffs counts runs that spent their quota with packets left
	// and handed the rest to the background goroutine.
	QuotaHandoffs uint64 `json:"quota_handoffs"`
	// HandedOff counts accepted packets that found the queue idle and were
	// queued for the background goroutine instead of bypassing it
	// (Options.HandOff).
	HandedOff uint64 `json:"handed_off"`
	// Rounds counts link receive rounds that held the running token
	// (RoundNotifier), deferring what their delivery wrote to one flush
	// at the round's end; RoundFlushes counts those flushes that found
	// packets to send. Sent/Batches against a run without rounds shows
	// what the deferral batched.
	Rounds       uint64 `json:"rounds"`
	RoundFlushes uint64 `json:"round_flushes"`
	// Blocked counts waits for room in a full queue registered through
	// Room: a stack's UDP writers waiting before they write or retry.
	Blocked uint64 `json:"blocked"`
	// LinkFull counts runs that stopped because the link was full;
	// WritableWakeups counts the link's signals that it can take more, and
	// TimerRetries the timed retries of links that cannot signal.
	LinkFull        uint64 `json:"link_full"`
	WritableWakeups uint64 `json:"writable_wakeups"`
	TimerRetries    uint64 `json:"timer_retries"`
	// Locks is the contention profile, one row per lock (or lock-free
	// list), shaped like `perf lock contention`.
	Locks []LockStats `json:"locks"`
	// Latency is the distribution of WritePacket's duration, over one call
	// in latencySampleEvery (16), picked at random.
	Latency Histogram `json:"writepacket_ns_log2"`
}

// Drops counts packets by the reason they were not sent.
type Drops struct {
	// Overlimit: the queue was at its limit.
	Overlimit uint64 `json:"overlimit"`
	// Burst: llist's deferred list was at its cap (qdisc_max_burst).
	Burst uint64 `json:"burst"`
	// Closed: the discipline was closed (refused after Close, or released
	// from the queue by Close).
	Closed uint64 `json:"closed"`
	// Link: the link failed the packet with an error other than "full".
	Link uint64 `json:"link"`
}

// Total returns the sum over every reason.
func (d Drops) Total() uint64 { return d.Overlimit + d.Burst + d.Closed + d.Link }

func (d Drops) sub(o Drops) Drops {
	return Drops{d.Overlimit - o.Overlimit, d.Burst - o.Burst, d.Closed - o.Closed, d.Link - o.Link}
}

// LockStats is one lock's contention, as `perf lock contention` reports it.
type LockStats struct {
	Name string `json:"name"`
	// Acquisitions counts every acquisition; Contended those that found the
	// lock held and waited (for llist's list: compare-and-swap retries).
	Acquisitions uint64 `json:"acquisitions"`
	Contended    uint64 `json:"contended"`
	// TotalWait and MaxWait are the time spent waiting in contended
	// acquisitions (zero for the lock-free list, which never waits). Only
	// one contended acquisition in waitSampleEvery is timed: TotalWait is
	// scaled up from those, MaxWait is the longest of those.
	TotalWait time.Duration `json:"total_wait_ns"`
	MaxWait   time.Duration `json:"max_wait_ns"`
}

// AvgWait is TotalWait over Contended.
func (l LockStats) AvgWait() time.Duration {
	if l.Contended == 0 {
		return 0
	}
	return l.TotalWait / time.Duration(l.Contended)
}

// Sub returns the counters accumulated since prev, a snapshot of the same
// discipline taken earlier. Backlog, MaxWait and Strategy are s's.
func (s Stats) Sub(prev Stats) Stats {
	d := s
	d.Offered -= prev.Offered
	d.Enqueued -= prev.Enqueued
	d.Bypassed -= prev.Bypassed
	d.Sent -= prev.Sent
	d.Bytes -= prev.Bytes
	d.Batches -= prev.Batches
	d.Requeued -= prev.Requeued
	d.Refused = s.Refused.sub(prev.Refused)
	d.Dropped = s.Dropped.sub(prev.Dropped)
	d.QuotaHandoffs -= prev.QuotaHandoffs
	d.HandedOff -= prev.HandedOff
	d.Rounds -= prev.Rounds
	d.RoundFlushes -= prev.RoundFlushes
	d.Blocked -= prev.Blocked
	d.LinkFull -= prev.LinkFull
	d.WritableWakeups -= prev.WritableWakeups
	d.TimerRetries -= prev.TimerRetries
	d.Locks = make([]LockStats, len(s.Locks))
	for i, l := range s.Locks {
		d.Locks[i] = l
		if i < len(prev.Locks) && prev.Locks[i].Name == l.Name {
			p := prev.Locks[i]
			d.Locks[i].Acquisitions -= p.Acquisitions
			d.Locks[i].Contended -= p.Contended
			d.Locks[i].TotalWait -= p.TotalWait
		}
	}
	for i := range d.Latency {
		d.Latency[i] -= prev.Latency[i]
	}
	return d
}

// WriteContention writes the contention profile and the latency histogram
// as text: a `perf lock contention` table, then a bpftrace-style @hist.
func (s Stats) WriteContention(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contended\ttotal wait\tmax wait\tavg wait\tacquired\tlock\t")
	for _, l := range s.Locks {
		fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%d\t%s\t\n", l.Contended, l.TotalWait, l.MaxWait, l.AvgWait(), l.Acquisitions, l.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, s.Latency.String())
	return err
}

// Histogram is a log2 histogram of nanoseconds: bucket i counts values v
// with 2^(i-1) <= v < 2^i (bucket 0 counts 0).
type Histogram [65]uint64

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns an upper bound of the q-quantile in nanoseconds: the top
// of the bucket it falls in.
func (h *Histogram) Quantile(q float64) uint64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := max(uint64(q*float64(n)+0.5), 1)
	var seen uint64
	for i, c := range h {
		if seen += c; seen >= rank {
			if i == 0 {
				return 0
			}
			return 1<<i - 1
		}
	}
	return 0
}

// String renders the histogram as bpftrace's @hist does: one line per
// non-empty bucket range with a bar scaled to the largest bucket.
func (h *Histogram) String() string {
	lo, hi, top := -1, -1, uint64(0)
	for i, c := range h {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
			top = max(top, c)
		}
	}
	var b strings.Builder
	b.WriteString("@writepacket_ns:\n")
	if lo < 0 {
		b.WriteString("(empty)\n")
		return b.String()
	}
	for i := lo; i <= hi; i++ {
		from, to := uint64(0), uint64(1)
		if i > 0 {
			from, to = 1<<(i-1), 1<<i
		}
		bar := int(52 * h[i] / top)
		fmt.Fprintf(&b, "[%s, %s)%*s %8d |%-52s|\n", size(from), size(to), 14-len(size(from))-len(size(to)), "", h[i], strings.Repeat("@", bar))
	}
	return b.String()
}

// size formats a power of two as bpftrace does: 1K, 2M, 4G.
func size(v uint64) string {
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dG", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dM", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dK", v>>10)
	}
	return fmt.Sprint(v)
}

// latencyStripes spreads concurrent recordings over separate cache lines:
// with every sender landing in the same one or two buckets, a single array
// of atomics would make the profile itself a point of contention.
const latencyStripes = 8

// latency is a striped, concurrently recorded Histogram.
type latency struct {
	stripes [latencyStripes]struct {
		buckets [65]atomic.Uint64
		_       [64]byte
	}
}

func (l *latency) record(d time.Duration) {
	i := 0
	if d > 0 {
		i = bits.Len64(uint64(d))
	}
	// rand.Uint32 reads per-thread state: no shared counter to pick a stripe.
	l.stripes[rand.Uint32()%latencyStripes].buckets[i].Add(1)
}

func (l *latency) snapshot() Histogram {
	var h Histogram
	for s := range l.stripes {
		for i := range h {
			h[i] += l.stripes[s].buckets[i].Load()
		}
	}
	return h
}

// profLock is a mutex that profiles its own contention. Its counters are
// only written while it is held, so they need no atomics of their own.
type profLock struct {
	mu   sync.Mutex
	name string

	acquired, contended uint64
	timed               uint64 // contended acquisitions that were timed
	waitTotal, waitMax  time.Duration
}

// waitSampleEvery: one contended acquisition in this many, at random, is
// timed. Two clock reads cost about 108 ns on kvm-clock, which under
// contention nearly doubled a free-link qdisc's cost per packet; sampled,
// the profile costs a fraction of that and still estimates the wait.
const waitSampleEvery = 4

// lock acquires l. Only an acquisition that finds the lock held may read
// the clock, so an uncontended lock costs one TryLock more than a bare
// mutex.
func (l *profLock) lock(profile bool) {
	if l.mu.TryLock() {
		l.acquired++
		return
	}
	if !profile || rand.Uint32()%waitSampleEvery != 0 {
		l.mu.Lock()
		l.acquired++
		l.contended++
		return
	}
	start := time.Now()
	l.mu.Lock()
	w := time.Since(start)
	l.acquired++
	l.contended++
	l.timed++
	l.waitTotal += w
	l.waitMax = max(l.waitMax, w)
}

func (l *profLock) unlock() { l.mu.Unlock() }

// stats reads l's counters, taking the lock.
func (l *profLock) stats() LockStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statsLocked()
}

func (l *profLock) statsLocked() LockStats {
	total := l.waitTotal
	if l.timed > 0 {
		total = time.Duration(float64(l.waitTotal) * float64(l.contended) / float64(l.timed))
	}
	return LockStats{Name: l.name, Acquisitions: l.acquired, Contended: l.contended, TotalWait: total, MaxWait: l.waitMax}
}
