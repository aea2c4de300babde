package poll

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Source is a link receive path that a reader can drive from its own
// goroutine. Implementations must be safe for concurrent use: several
// readers may poll one Source at once, and its own receive goroutine runs
// beside them.
type Source interface {
	// BusyPollBegin tells the source a reader is about to poll it: until
	// the matching BusyPollEnd it leaves its receive goroutine parked
	// rather than waking it for new packets (prefer-busy-poll).
	BusyPollBegin()
	// BusyPoll runs at most one bounded, non-blocking receive round from
	// the caller's goroutine, delivers what it took into the stack, and
	// returns how many packets that was. It returns 0 at once when the
	// queue is empty or another goroutine is already draining it.
	BusyPoll() int
	// BusyPollEnd undoes one BusyPollBegin; the last one re-arms the
	// receive goroutine if packets are waiting.
	BusyPollEnd()
	// BusyPollWatchdog lets the receive goroutine deliver what is waiting
	// although readers claim to poll, and reports whether they still do.
	// The Poller calls it when no reader has started a wait for a while,
	// and again every watchdogSlack while readers still claim to poll, so
	// a reader that stopped polling (descheduled, blocked in the
	// application) cannot strand packets.
	BusyPollWatchdog() bool
}

// Stats counts what a Poller did. All counts are since New.
type Stats struct {
	Mode string `json:"mode"`
	// Waits counts readers that found their socket empty and asked to
	// busy poll.
	Waits uint64 `json:"waits"`
	// Polls counts receive rounds readers ran; PollsFound those that
	// delivered at least one packet.
	Polls      uint64 `json:"polls"`
	PollsFound uint64 `json:"polls_found"`
	// Hits counts waits that ended with the reader's data ready.
	Hits uint64 `json:"hits"`
	// RunnableExits counts waits cut short because other goroutines were
	// waiting to run; BudgetExhausted those that spent their budget.
	RunnableExits   uint64 `json:"runnable_exits"`
	BudgetExhausted uint64 `json:"budget_exhausted"`
	// Parks counts waits after which the reader parked: every wait
	// without a hit, including those adaptive gave no budget at all.
	Parks uint64 `json:"parks"`
	// Probes counts waits adaptive granted the least budget to, while
	// its budget was zero, to notice traffic coming back.
	Probes uint64 `json:"probes"`
	// SpinTime is the CPU time readers spent busy polling.
	SpinTime time.Duration `json:"spin_ns"`
	// WatchdogRearms counts watchdog calls that found readers still
	// claiming to poll, and so let the receive goroutines run.
	WatchdogRearms uint64 `json:"watchdog_rearms"`
	// Budget is the budget a wait gets now (adaptive's moves).
	Budget time.Duration `json:"budget_ns"`
}

// Poller runs busy-polling waits for the readers of one stack over that
// stack's Sources. It is safe for concurrent use. Close stops its
// watchdog; a closed Poller parks every reader at once.
type Poller struct {
	mode     Mode
	sources  atomic.Pointer[[]Source]
	budget   atomic.Int64 // adaptive's current budget in ns
	waitSeq  atomic.Uint64
	watchdog *time.Timer
	// watchdogAt is when the watchdog fires, in nanotime; a wait that
	// will be done by then does not touch the timer.
	watchdogAt atomic.Int64

	mu     sync.Mutex // serialises source changes, Close and the watchdog
	closed atomic.Bool

	waits, polls, pollsFound, hits    atomic.Uint64
	runnableExits, exhausted, parks   atomic.Uint64
	probes, spinNanos, watchdogRearms atomic.Uint64
}

// Tuning of the wait loop.
const (
	// probeEvery: while adaptive's budget is zero, one wait in this many
	// gets MinAdaptiveBudget, so a stack whose traffic comes back starts
	// spinning again; on an idle stack no wait happens at all.
	probeEvery = 64
	// watchdogSlack is added to the budget to arm the watchdog: a reader
	// that has not ended its wait by then has been descheduled.
	watchdogSlack = 200 * time.Microsecond
)

// New returns a Poller with mode m and no sources.
func New(m Mode) (*Poller, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	p := &Poller{mode: m}
	p.sources.Store(&[]Source{})
	if m.Kind == Adaptive {
		p.budget.Store(int64(m.Budget))
	}
	p.watchdog = time.AfterFunc(time.Hour, p.watchdogFired)
	p.watchdog.Stop()
	return p, nil
}

// Mode returns the mode the Poller was made with.
func (p *Poller) Mode() Mode { return p.mode }

// Enabled reports whether readers should call Wait at all: the mode is
// not Off and the Poller is not closed.
func (p *Poller) Enabled() bool { return p != nil && p.mode.Kind != Off && !p.closed.Load() }

// Add makes readers poll s too.
func (p *Poller) Add(s Source) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.sources.Load()
	srcs := append(append(make([]Source, 0, len(old)+1), old...), s)
	p.sources.Store(&srcs)
}

// Remove stops readers from polling s.
func (p *Poller) Remove(s Source) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.sources.Load()
	srcs := make([]Source, 0, len(old))
	for _, o := range old {
		if o != s {
			srcs = append(srcs, o)
		}
	}
	p.sources.Store(&srcs)
}

// Close stops the watchdog and drops the sources; later waits park at once.
// It waits for a watchdog run in progress.
func (p *Poller) Close() {
	p.mu.Lock()
	p.closed.Store(true)
	p.sources.Store(&[]Source{})
	p.mu.Unlock()
	p.watchdog.Stop()
}

func (p *Poller) watchdogFired() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return
	}
	polling := false
	for _, s := range *p.sources.Load() {
		if s.BusyPollWatchdog() {
			polling = true
		}
	}
	if polling {
		// A reader still claims to poll: look again soon, until it
		// stops or comes back.
		p.watchdogRearms.Add(1)
		p.watchdogAt.Store(nanotime() + int64(watchdogSlack))
		p.watchdog.Reset(watchdogSlack)
	}
}

// outcome is how one wait ended.
type outcome uint8

const (
	hit outcome = iota
	exhausted
	yielded
)

// Wait busy polls until ready reports true, and reports whether it did;
// false means the caller should park as it would without busy polling.
// The caller has already found ready false once. ready must be cheap and
// must turn true when the reader's conn is closed, so Close interrupts a
// spinning reader.
func (p *Poller) Wait(ready func() bool) bool {
	if !p.Enabled() {
		return false
	}
	p.waits.Add(1)
	budget := p.budgetNow()
	srcs := *p.sources.Load()
	if budget <= 0 {
		p.parks.Add(1)
		return false
	}
	for _, s := range srcs {
		s.BusyPollBegin()
	}
	start := nanotime()
	// Re-arm the watchdog only when it would fire while this wait may
	// still spin: one timer reset per watchdogSlack, not per wait.
	if start+budget > p.watchdogAt.Load() {
		p.watchdogAt.Store(start + budget + int64(watchdogSlack))
		p.watchdog.Reset(time.Duration(budget) + watchdogSlack)
	}
	deadline := start + budget
	var polls, found uint64
	var how outcome
	for {
		n := 0
		for _, s := range srcs {
			n += s.BusyPoll()
		}
		polls++
		if n > 0 {
			found++
		}
		if ready() {
			how = hit
			break
		}
		now := nanotime()
		if now >= deadline {
			how = exhausted
			break
		}
		if p.mode.Kind != Spin && othersRunnable(now) {
			how = yielded
			break
		}
		switch {
		case p.mode.Kind == Spin:
		case n > 0:
			// The round readied the goroutines that finish its work
			// (gVisor hands every TCP segment to a processor
			// goroutine), in this P's next slot: hand them the P and
			// come back, cheaper than parking and being woken.
			runtime.Gosched()
		case len(srcs) == 0:
			// Nothing to drive: the data can only come from another
			// goroutine, so let it run rather than spin on the socket.
			runtime.Gosched()
		}
	}
	for _, s := range srcs {
		s.BusyPollEnd()
	}
	spent := nanotime() - start
	p.polls.Add(polls)
	p.pollsFound.Add(found)
	p.spinNanos.Add(uint64(spent))
	switch how {
	case hit:
		p.hits.Add(1)
	case exhausted:
		p.exhausted.Add(1)
		p.parks.Add(1)
	case yielded:
		p.runnableExits.Add(1)
		p.parks.Add(1)
	}
	p.adapt(how, spent)
	return how == hit
}

// budgetNow returns the budget of the next wait in nanoseconds.
func (p *Poller) budgetNow() int64 {
	if p.mode.Kind != Adaptive {
		return int64(p.mode.Budget)
	}
	if b := p.budget.Load(); b > 0 {
		return b
	}
	if p.waitSeq.Add(1)%probeEvery != 0 {
		return 0
	}
	p.probes.Add(1)
	return int64(p.mode.Budget)
}

// adapt moves adaptive's budget after a wait that spent spent ns, so
// that it follows the hit rate: a hit raises it to at least twice what
// the hit took (the next wait, probably alike, then fits); a spent budget
// halves it; a wait cut short by runnable goroutines without data shrinks
// it by a quarter, since on a machine that always has other work spinning
// cannot pay. Below MinAdaptiveBudget it is zero, and only probes, with
// the whole ceiling, spin. Concurrent waits race on the store; either
// result is a reasonable budget.
func (p *Poller) adapt(how outcome, spent int64) {
	if p.mode.Kind != Adaptive {
		return
	}
	b := p.budget.Load()
	switch how {
	case hit:
		b = min(max(b, 2*spent, int64(MinAdaptiveBudget)), int64(p.mode.Budget))
	case exhausted:
		b /= 2
	case yielded:
		b -= b / 4
	}
	if b < int64(MinAdaptiveBudget) {
		b = 0
	}
	p.budget.Store(b)
}

// Stats returns the counters.
func (p *Poller) Stats() Stats {
	s := Stats{
		Mode:            p.mode.String(),
		Waits:           p.waits.Load(),
		Polls:           p.polls.Load(),
		PollsFound:      p.pollsFound.Load(),
		Hits:            p.hits.Load(),
		RunnableExits:   p.runnableExits.Load(),
		BudgetExhausted: p.exhausted.Load(),
		Parks:           p.parks.Load(),
		Probes:          p.probes.Load(),
		SpinTime:        time.Duration(p.spinNanos.Load()),
		WatchdogRearms:  p.watchdogRearms.Load(),
		Budget:          p.mode.Budget,
	}
	if p.mode.Kind == Adaptive {
		s.Budget = time.Duration(p.budget.Load())
	}
	if p.mode.Kind == Off {
		s.Budget = 0
	}
	return s
}

// Sub returns the counts of s minus those of old, for a measurement window.
func (s Stats) Sub(old Stats) Stats {
	s.Waits -= old.Waits
	s.Polls -= old.Polls
	s.PollsFound -= old.PollsFound
	s.Hits -= old.Hits
	s.RunnableExits -= old.RunnableExits
	s.BudgetExhausted -= old.BudgetExhausted
	s.Parks -= old.Parks
	s.Probes -= old.Probes
	s.SpinTime -= old.SpinTime
	s.WatchdogRearms -= old.WatchdogRearms
	return s
}

var epoch = time.Now()

// nanotime is a monotonic clock in nanoseconds. It is a variable so that a
// test can stop it: a wait whose budget cannot run out counts its polls
// exactly, however the machine schedules it.
var nanotime = func() int64 { return int64(time.Since(epoch)) }

// runnableMetric counts goroutines waiting in run queues, across the
// process. Reading it takes the scheduler lock and costs about 170 ns, so
// the value is shared: a spinner re-reads it only when it is older than
// runnableTTL, and only one spinner reads at a time.
const (
	runnableMetric = "/sched/goroutines/runnable:goroutines"
	runnableTTL    = 2 * time.Microsecond
)

var runnable struct {
	mu     sync.Mutex // held by the one spinner refreshing sample
	sample [1]metrics.Sample
	n      atomic.Uint64
	at     atomic.Int64
}

func init() { runnable.sample[0].Name = runnableMetric }

// othersRunnable reports whether goroutines are waiting to run, using a
// value at most runnableTTL old when one is at hand.
func othersRunnable(now int64) bool {
	if now-runnable.at.Load() >= int64(runnableTTL) && runnable.mu.TryLock() {
		metrics.Read(runnable.sample[:])
		var n uint64
		if runnable.sample[0].Value.Kind() == metrics.KindUint64 {
			n = runnable.sample[0].Value.Uint64()
		}
		runnable.n.Store(n)
		runnable.at.Store(now)
		runnable.mu.Unlock()
	}
	return runnable.n.Load() > 0
}
