package bench

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// Result is one cell's outcome. The JSON names are the stable interface of
// `ustack bench -json`.
type Result struct {
	Test      string  `json:"test"`
	Link      string  `json:"link"`
	Qdisc     string  `json:"qdisc"`
	Senders   int     `json:"senders"`
	Size      int     `json:"size"`
	DurationS float64 `json:"duration_s"` // the measured window
	// SentPPS and RecvPPS: datagrams (UDP tests) or client-to-server link
	// packets (TCP tests) per second, sent and received. On the WireGuard
	// links (wg, wg-netstack) a TCP test's link packets are those
	// crossing the TUNs: read by wireguard-go from the client's, written
	// by it to the server's.
	SentPPS float64 `json:"sent_pps"`
	RecvPPS float64 `json:"recv_pps"`
	// Gbps is application payload received, in 10^9 bits per second.
	Gbps float64 `json:"gbps"`
	// TPS is completed transactions per second (rr tests; 0 otherwise).
	TPS float64 `json:"tps"`
	// LossPct is the share of what was sent in the window that never
	// arrived: datagrams (udp_stream), packets lost on the wire (TCP
	// tests), transactions timed out (udp_rr).
	LossPct float64 `json:"loss_pct"`
	// Costs per operation (see the package doc for what an operation is),
	// for the whole process: both hosts and the harness.
	CPUNsPerOp  float64 `json:"cpu_ns_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	// VCSW and IVCSW are the voluntary and involuntary context switches of
	// the process during the window.
	VCSW  float64 `json:"vcsw"`
	IVCSW float64 `json:"ivcsw"`
	// Transaction latency percentiles in microseconds (rr tests).
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p999_us"`
	// Contention is what the qdiscs counted in the window: their counters,
	// lock contention and WritePacket latency. Nil for gVisor's none and
	// fifo, which keep none.
	Contention *Contention `json:"contention,omitempty"`
	// BusyPoll is the hosts' busy polling mode ("off" when none), and
	// BusyPollStats what their busy-polling readers did in the window.
	BusyPoll      string         `json:"busypoll"`
	BusyPollStats *BusyPollStats `json:"busypoll_stats,omitempty"`
	// Cache is the ustack hosts' buffer cache setting, "on" or "off"
	// ("-" for kveth and wg-netstack, which have no ustack host).
	Cache string `json:"cache"`
	// PeakRSSMiB is the process's peak resident memory during the cell,
	// from building the hosts to closing them, in MiB (Linux: VmHWM, reset
	// before the cell; 0 where that is not available). Each cell starts
	// after a collection that returns free memory to the OS.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// BusyPollStats holds the busy polling counters of both ustack hosts for
// one cell (nil for a kernel end).
type BusyPollStats struct {
	Client *poll.Stats `json:"client,omitempty"`
	Server *poll.Stats `json:"server,omitempty"`
}

// Contention holds the qdisc profiles of both hosts for one cell: the
// client's qdisc carries the senders' traffic, the server's the answers
// and ACKs.
type Contention struct {
	Client *sched.Stats `json:"client,omitempty"`
	Server *sched.Stats `json:"server,omitempty"`
}

// Phases of a cell, published to every worker through one atomic.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// counter is a single-writer counter on its own cache line, so that
// workers publishing their counts never share a line.
type counter struct {
	atomic.Uint64
	_ [56]byte
}

// tally is what a workload counted by the end of a window.
type tally struct {
	sent, recv   uint64 // datagrams or transactions (UDP and rr tests)
	lost         uint64 // transactions timed out (udp_rr)
	transactions uint64
	hist         histogram
}

// workload is one test's traffic between the hosts.
type workload interface {
	// start opens the sessions and starts the workers, which run in the
	// warm-up phase until the harness opens the window.
	start(r *cell) error
	// snapshot reads the byte counters that can only be sampled (TCP).
	snapshot() uint64
	// finish runs after the phase is phaseStop: it stops and joins every
	// worker, drains what is in flight, closes every socket, and returns
	// the window's tally.
	finish() tally
}

// cell is the harness state of one running configuration.
type cell struct {
	c     Config
	topo  *topology
	size  int
	phase atomic.Int32

	errMu sync.Mutex
	err   error // the first unexpected worker error
}

func (r *cell) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
}

func (r *cell) failure() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// Run runs one cell on fresh hosts and returns its result.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	// Start every cell from the same heap state, so that one cell's garbage
	// is not collected on the next one's time, and with the memory earlier
	// cells left free given back, so that the peak is this cell's.
	debug.FreeOSMemory()
	rssReset := resetPeakRSS()
	topo, err := newTopology(c)
	if err != nil {
		return Result{}, fmt.Errorf("%v: build hosts: %w", c, err)
	}
	closed := false
	defer func() {
		if !closed {
			topo.close()
		}
	}()
	r := &cell{c: c, topo: topo, size: c.size()}
	var w workload
	switch c.Test {
	case UDPStream:
		w = &udpStream{}
	case TCPStream:
		w = &tcpStream{}
	case TCPRR:
		w = &tcpRR{}
	case UDPRR:
		w = &udpRR{}
	}
	if err := w.start(r); err != nil {
		r.phase.Store(phaseStop)
		w.finish()
		return Result{}, fmt.Errorf("%v: %w", c, err)
	}

	stopped := sleep(ctx, warmup(c.Duration))
	tx0, rx0, lost0 := topo.clientTX(), topo.serverRX(), topo.wireLost()
	q0c, q0s := topo.qdiscs()
	p0c, p0s := topo.polls()
	b0 := w.snapshot()
	u0 := readUsage()
	r.phase.Store(phaseMeasure)
	if !stopped {
		stopped = sleep(ctx, c.Duration)
	}
	r.phase.Store(phaseStop)
	u1 := readUsage()
	b1 := w.snapshot()
	q1c, q1s := topo.qdiscs()
	p1c, p1s := topo.polls()
	tx1, rx1, lost1 := topo.clientTX(), topo.serverRX(), topo.wireLost()
	t := w.finish()
	if stopped {
		return Result{}, ctx.Err()
	}
	if err := r.failure(); err != nil {
		return Result{}, fmt.Errorf("%v: %w", c, err)
	}
	res := r.result(u0, u1, wire{tx: tx1 - tx0, rx: rx1 - rx0, lost: lost1 - lost0}, b1-b0, t)
	closed = true
	topo.close()
	if rssReset {
		res.PeakRSSMiB = peakRSSMiB()
	}
	if q1c != nil || q1s != nil {
		res.Contention = &Contention{Client: since(q0c, q1c), Server: since(q0s, q1s)}
	}
	if c.BusyPoll.Kind != poll.Off {
		res.BusyPollStats = &BusyPollStats{Client: pollSince(p0c, p1c), Server: pollSince(p0s, p1s)}
	}
	return res, nil
}

// since returns what a qdisc counted between two snapshots.
func since(before, after *sched.Stats) *sched.Stats {
	if before == nil || after == nil {
		return nil
	}
	d := after.Sub(*before)
	return &d
}

func pollSince(before, after *poll.Stats) *poll.Stats {
	if before == nil || after == nil {
		return nil
	}
	d := after.Sub(*before)
	return &d
}

// wire is what the link counted of client-to-server packets in a window.
type wire struct{ tx, rx, lost uint64 }

// result turns the window's measurements into a Result.
func (r *cell) result(u0, u1 usage, w wire, tcpBytes uint64, t tally) Result {
	c := r.c
	win := u1.at.Sub(u0.at).Seconds()
	res := Result{Test: c.Test, Link: c.Link, Qdisc: c.Qdisc, BusyPoll: c.BusyPoll.String(), Cache: c.Cache.String(), Senders: c.Senders, Size: r.size, DurationS: win}
	if c.Link == "kveth" || c.Link == LinkWGNetstack {
		res.Cache = "-" // no ustack host
	}
	var ops, bytes uint64
	switch c.Test {
	case UDPStream:
		res.SentPPS = float64(t.sent) / win
		res.RecvPPS = float64(t.recv) / win
		res.LossPct = pct(t.sent-min(t.recv, t.sent), t.sent)
		ops, bytes = t.sent, t.recv*uint64(r.size)
	case TCPStream:
		res.SentPPS = float64(w.tx) / win
		res.RecvPPS = float64(w.rx) / win
		res.LossPct = pct(w.lost, w.tx)
		ops, bytes = w.rx, tcpBytes
	case TCPRR:
		res.SentPPS = float64(w.tx) / win
		res.RecvPPS = float64(w.rx) / win
		res.LossPct = pct(w.lost, w.tx)
		ops, bytes = t.transactions, t.transactions*uint64(r.size)
	case UDPRR:
		res.SentPPS = float64(t.sent) / win
		res.RecvPPS = float64(t.recv) / win
		res.LossPct = pct(t.lost, t.transactions+t.lost)
		ops, bytes = t.transactions, t.transactions*uint64(r.size)
	}
	res.Gbps = float64(bytes) * 8 / win / 1e9
	if c.Test == TCPRR || c.Test == UDPRR {
		res.TPS = float64(t.transactions) / win
		res.P50us = t.hist.quantile(0.50)
		res.P99us = t.hist.quantile(0.99)
		res.P999us = t.hist.quantile(0.999)
	}
	if ops > 0 {
		res.CPUNsPerOp = float64((u1.cpu - u0.cpu).Nanoseconds()) / float64(ops)
		res.AllocsPerOp = float64(u1.allocs-u0.allocs) / float64(ops)
		res.BytesPerOp = float64(u1.bytes-u0.bytes) / float64(ops)
	}
	res.VCSW = float64(u1.vcsw - u0.vcsw)
	res.IVCSW = float64(u1.ivcsw - u0.ivcsw)
	return res
}

func pct(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// sleep waits for d or for ctx to end, and reports whether ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	}
}

// waitTimeout waits for wg, or for d, and reports whether wg finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
