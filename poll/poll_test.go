package poll

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
	}{
		{"off", Mode{}},
		{"on", Mode{On, DefaultBudget}},
		{"on:50", Mode{On, 50 * time.Microsecond}},
		{"spin:20", Mode{Spin, 20 * time.Microsecond}},
		{"adaptive", Mode{Adaptive, DefaultBudget}},
		{"adaptive:200", Mode{Adaptive, 200 * time.Microsecond}},
	} {
		m, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, m, tc.in)
		back, err := Parse(m.String())
		require.NoError(t, err)
		require.Equal(t, m, back, "String round-trips through Parse")
	}
	for _, bad := range []string{"", "busy", "on:", "on:0", "on:-5", "on:x", "off:5", "on:5000", "adaptive:2"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
	_, err := New(Mode{Kind: 9, Budget: time.Microsecond})
	require.Error(t, err)
}

// fakeSource has packets for the reader after a given number of polls.
type fakeSource struct {
	mu              sync.Mutex
	polling         int
	polls, rearms   int
	begins, ends    int
	deliverAt       int // the poll that "delivers" the reader's data; 0: never
	delivered       atomic.Bool
	maxPollingSeen  int
	watchdogPolling int
}

func (f *fakeSource) BusyPollBegin() {
	f.mu.Lock()
	f.polling++
	f.begins++
	f.maxPollingSeen = max(f.maxPollingSeen, f.polling)
	f.mu.Unlock()
}

func (f *fakeSource) BusyPollEnd() {
	f.mu.Lock()
	f.polling--
	f.ends++
	f.mu.Unlock()
}

func (f *fakeSource) BusyPoll() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	if f.polls == f.deliverAt {
		f.delivered.Store(true)
		return 1
	}
	return 0
}

func (f *fakeSource) BusyPollWatchdog() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.polling == 0 {
		return false
	}
	f.rearms++
	f.watchdogPolling = f.polling
	return true
}

func TestWaitHit(t *testing.T) {
	// A stopped clock: the budget cannot run out however long the
	// machine keeps this goroutine from running between polls.
	defer func(f func() int64) { nanotime = f }(nanotime)
	now := nanotime()
	nanotime = func() int64 { return now }
	p, err := New(Mode{Spin, MaxBudget})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{deliverAt: 5}
	p.Add(src)
	require.True(t, p.Wait(src.delivered.Load))
	s := p.Stats()
	require.Equal(t, uint64(1), s.Waits)
	require.Equal(t, uint64(1), s.Hits)
	require.Equal(t, uint64(5), s.Polls, "the reader polled until its data arrived")
	require.Equal(t, uint64(1), s.PollsFound)
	require.Zero(t, s.Parks)
	require.Equal(t, 1, src.begins)
	require.Equal(t, 1, src.ends, "every Begin is ended")
}

func TestWaitExhausted(t *testing.T) {
	p, err := New(Mode{Spin, 20 * time.Microsecond})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{}
	p.Add(src)
	require.False(t, p.Wait(func() bool { return false }))
	s := p.Stats()
	require.Equal(t, uint64(1), s.BudgetExhausted)
	require.Equal(t, uint64(1), s.Parks)
	require.Positive(t, s.Polls)
	require.GreaterOrEqual(t, s.SpinTime, 20*time.Microsecond, "spin time covers the budget")
	require.Equal(t, 0, src.polling)
}

func TestOffNeverPolls(t *testing.T) {
	p, err := New(Mode{})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{deliverAt: 1}
	p.Add(src)
	require.False(t, p.Wait(src.delivered.Load))
	require.Zero(t, src.polls)
	require.Zero(t, p.Stats().Waits)
	var nilPoller *Poller
	require.False(t, nilPoller.Enabled())
}

// TestRunnableExit: with another goroutine always runnable, a wait in On
// mode gives up at once instead of spending a long budget; Spin does not.
func TestRunnableExit(t *testing.T) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	// More busy goroutines than Ps: some are always waiting to run.
	for range 4 * max(1, runtimeProcs()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				burn()
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	on, err := New(Mode{On, MaxBudget})
	require.NoError(t, err)
	defer on.Close()
	on.Add(&fakeSource{})
	for range 20 {
		require.False(t, on.Wait(func() bool { return false }))
	}
	s := on.Stats()
	require.Positive(t, s.RunnableExits)
	require.Less(t, s.BudgetExhausted, uint64(20), "the runnable check cut waits short")

	spin, err := New(Mode{Spin, 50 * time.Microsecond})
	require.NoError(t, err)
	defer spin.Close()
	spin.Add(&fakeSource{})
	for range 5 {
		spin.Wait(func() bool { return false })
	}
	require.Zero(t, spin.Stats().RunnableExits, "spin ignores runnable goroutines")
	require.Equal(t, uint64(5), spin.Stats().BudgetExhausted)
}

var sink atomic.Uint64

func burn() {
	x := uint64(1)
	for i := range 1000 {
		x = x*31 + uint64(i)
	}
	sink.Add(x)
}

// TestAdaptiveIdle: waits that never find data take adaptive's budget to
// zero, after which waits park without polling, but for rare probes; data
// coming back brings the budget back.
func TestAdaptiveIdle(t *testing.T) {
	p, err := New(Mode{Adaptive, DefaultBudget})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{}
	p.Add(src)
	require.Equal(t, DefaultBudget, p.Stats().Budget, "adaptive starts at its ceiling")
	for range 20 {
		p.Wait(func() bool { return false })
	}
	require.Zero(t, p.Stats().Budget, "an idle stack stops spinning")
	before := p.Stats()
	for range 10 * probeEvery {
		require.False(t, p.Wait(func() bool { return false }))
	}
	s := p.Stats().Sub(before)
	require.Equal(t, uint64(10), s.Probes, "one probe in %d waits", probeEvery)
	require.Equal(t, uint64(10*probeEvery), s.Parks)
	require.LessOrEqual(t, s.BudgetExhausted+s.RunnableExits, s.Probes, "only probes spun")

	// Traffic again: a probe that hits restores a budget.
	src.mu.Lock()
	src.deliverAt = src.polls + 1
	src.mu.Unlock()
	for i := 0; i < 2*probeEvery && p.Stats().Budget == 0; i++ {
		p.Wait(src.delivered.Load)
	}
	require.GreaterOrEqual(t, p.Stats().Budget, MinAdaptiveBudget)
}

// TestAdaptiveGrows: waits that hit keep the budget up, bounded by the
// mode's budget.
func TestAdaptiveGrows(t *testing.T) {
	p, err := New(Mode{Adaptive, 30 * time.Microsecond})
	require.NoError(t, err)
	defer p.Close()
	for range 50 {
		// Ready at the first check, which comes before any runnable
		// check: every wait is a hit whatever else runs.
		p.Wait(func() bool { return true })
	}
	s := p.Stats()
	require.Equal(t, uint64(50), s.Hits)
	require.Equal(t, 30*time.Microsecond, s.Budget, "hits grow the budget to its ceiling")
}

// TestWatchdog: a reader that stops mid-wait (here: its readiness check
// blocks) leaves the sources to the watchdog, which re-arms them.
func TestWatchdog(t *testing.T) {
	p, err := New(Mode{Spin, 10 * time.Microsecond})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{}
	p.Add(src)
	p.Wait(func() bool {
		time.Sleep(20 * time.Millisecond) // far past budget + slack
		return true
	})
	s := p.Stats()
	require.GreaterOrEqual(t, s.WatchdogRearms, uint64(2), "the watchdog called, and called again while the reader stayed away")
	src.mu.Lock()
	defer src.mu.Unlock()
	require.Equal(t, int(s.WatchdogRearms), src.rearms)
	require.Equal(t, 1, src.watchdogPolling, "the watchdog found the reader still polling")
}

// TestClose: after Close a wait parks at once, and sources are dropped.
func TestClose(t *testing.T) {
	p, err := New(Mode{On, MaxBudget})
	require.NoError(t, err)
	src := &fakeSource{}
	p.Add(src)
	require.True(t, p.Enabled())
	p.Close()
	p.Close()
	require.False(t, p.Enabled())
	calls := 0
	require.False(t, p.Wait(func() bool { calls++; return false }), "a closed poller lets the reader park")
	require.Zero(t, calls, "and does not spin")
	require.Zero(t, src.begins, "a closed poller touches no source")
	require.Zero(t, p.Stats().Waits)
}

// TestConcurrentWaits: many readers at once keep Begin and End paired.
func TestConcurrentWaits(t *testing.T) {
	p, err := New(Mode{Adaptive, DefaultBudget})
	require.NoError(t, err)
	defer p.Close()
	src := &fakeSource{}
	p.Add(src)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := 0
				p.Wait(func() bool { n++; return (g+i)%3 == 0 && n > 2 })
			}
		}()
	}
	wg.Wait()
	src.mu.Lock()
	defer src.mu.Unlock()
	require.Zero(t, src.polling)
	require.Equal(t, src.begins, src.ends)
	s := p.Stats()
	require.Equal(t, uint64(1600), s.Waits)
	require.Equal(t, s.Waits, s.Hits+s.Parks)
}

func TestRemove(t *testing.T) {
	p, err := New(Mode{Spin, 5 * time.Microsecond})
	require.NoError(t, err)
	defer p.Close()
	a, b := &fakeSource{}, &fakeSource{}
	p.Add(a)
	p.Add(b)
	p.Remove(a)
	p.Wait(func() bool { return false })
	require.Zero(t, a.polls)
	require.Positive(t, b.polls)
}

func BenchmarkWaitHit(b *testing.B) {
	p, err := New(Mode{On, DefaultBudget})
	require.NoError(b, err)
	defer p.Close()
	p.Add(&fakeSource{})
	ready := func() bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		p.Wait(ready)
	}
}

func BenchmarkWaitAdaptiveZero(b *testing.B) {
	p, err := New(Mode{Adaptive, DefaultBudget})
	require.NoError(b, err)
	defer p.Close()
	p.budget.Store(0)
	ready := func() bool { return false }
	b.ReportAllocs()
	for b.Loop() {
		p.Wait(ready)
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// FuzzParse: no input panics Parse, whatever it accepts passes Check, and
// String reads back as the same mode.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"off", "on", "on:50", "spin:1000", "adaptive", "adaptive:5", "on:1001", "on:-1", "x:1", ":", "on:0050"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err != nil {
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("Parse(%q) accepted %+v: %v", s, m, err)
		}
		back, err := Parse(m.String())
		if err != nil || back != m {
			t.Fatalf("Parse(%q) = %+v, whose String %q reads back as %+v, %v", s, m, m.String(), back, err)
		}
	})
}
