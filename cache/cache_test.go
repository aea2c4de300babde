package cache

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// buf is the test's item: a byte buffer, as the links cache.
type buf struct {
	b []byte
	// holder is set while someone holds the item, to catch an item handed
	// to two holders at once.
	holder atomic.Bool
	ref    *int // a reference Reset must drop
}

const poison = 0xdb

func bufConfig(size, maxItems, maxBytes int) Config[buf] {
	return Config[buf]{
		Name:     "test",
		New:      func() buf { return buf{b: make([]byte, size)} },
		Reset:    func(b *buf) { b.b = b.b[:cap(b.b)]; b.ref = nil },
		Size:     func(b *buf) int { return cap(b.b) },
		MaxItems: maxItems,
		MaxBytes: maxBytes,
	}
}

func poisoned(cfg Config[buf]) Config[buf] {
	cfg.Poison = func(b *buf) {
		for i := range b.b {
			b.b[i] = poison
		}
	}
	cfg.Check = func(b *buf) bool {
		for _, v := range b.b {
			if v != poison {
				return false
			}
		}
		return true
	}
	return cfg
}

func TestOwnerGetPut(t *testing.T) {
	c := New(bufConfig(64, 4, 0))
	defer c.Close()
	a := c.Get()
	c.Reclaim() // publishes the owner's counters
	require.Equal(t, Stats{Misses: 1}, c.Stats())
	x := 1
	a.V.b = a.V.b[:10]
	a.V.ref = &x
	c.Put(a)
	c.Reclaim()
	require.Equal(t, Stats{Misses: 1, Held: 1, HeldBytes: 64}, c.Stats())
	b := c.Get()
	require.Same(t, a, b, "the owner gets back what it put")
	require.Len(t, b.V.b, 64, "reset restores the length")
	require.Nil(t, b.V.ref, "reset drops references")
	c.Reclaim()
	require.Equal(t, Stats{Hits: 1, Misses: 1}, c.Stats())
	c.Put(b)
}

func TestFreeFromOtherGoroutinesIsReclaimed(t *testing.T) {
	c := New(bufConfig(64, 64, 0))
	defer c.Close()
	items := make([]*Item[buf], 32)
	for i := range items {
		items[i] = c.Get()
	}
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(it.Free)
	}
	wg.Wait()
	s := c.Stats()
	require.EqualValues(t, 32, s.Returns)
	require.EqualValues(t, 32, s.Held)
	require.Equal(t, 32, c.Reclaim())
	seen := map[*Item[buf]]bool{}
	for range 32 {
		it := c.Get()
		require.False(t, seen[it], "an item handed out twice")
		seen[it] = true
	}
	c.Reclaim()
	s = c.Stats()
	require.EqualValues(t, 32, s.Hits)
	require.EqualValues(t, 32, s.Misses)
	for it := range seen {
		c.Put(it)
	}
}

// TestCapUnderBurst: a burst of frees far beyond the cap, from many
// goroutines at once, leaves the cache within its caps, and what did not
// fit is counted.
func TestCapUnderBurst(t *testing.T) {
	for _, tc := range []struct {
		name               string
		maxItems, maxBytes int
		want               int64
	}{
		{"items", 16, 1 << 20, 16},
		{"bytes", 1000, 10 * 1024, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(bufConfig(1024, tc.maxItems, tc.maxBytes))
			defer c.Close()
			const burst = 1000
			items := make([]*Item[buf], burst)
			for i := range items {
				items[i] = c.Get()
			}
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < burst; i += 8 {
						items[i].Free()
					}
				})
			}
			wg.Wait()
			s := c.Stats()
			require.Equal(t, tc.want, s.Held)
			require.LessOrEqual(t, s.HeldBytes, int64(tc.maxBytes))
			require.EqualValues(t, burst-tc.want, s.Overflow)
			require.EqualValues(t, burst, s.Returns)
			// The owner's own puts respect the cap too.
			c.Reclaim()
			extra := make([]*Item[buf], 0, burst)
			for range burst {
				extra = append(extra, c.Get())
			}
			for _, it := range extra {
				c.Put(it)
			}
			c.Reclaim()
			require.Equal(t, tc.want, c.Stats().Held)
		})
	}
}

// TestIdleRelease: a parked cache whose owner stays away for IdleAfter is
// emptied; one whose owner keeps coming back is not.
func TestIdleRelease(t *testing.T) {
	cfg := bufConfig(4096, 8, 0)
	cfg.IdleAfter = time.Second
	c := New(cfg)
	defer c.Close()
	items := []*Item[buf]{c.Get(), c.Get(), c.Get()}
	for _, it := range items {
		c.Put(it)
	}
	c.Get().Free() // one through the return list as well
	c.Park()
	require.EqualValues(t, 3, c.Stats().Held)
	c.sweep(sweepEvery) // the owner was active in this period
	require.EqualValues(t, 3, c.Stats().Held)
	for i := 0; time.Duration(i)*sweepEvery < cfg.IdleAfter; i++ {
		require.EqualValues(t, 3, c.Stats().Held, "released too early")
		c.sweep(sweepEvery)
	}
	s := c.Stats()
	require.Zero(t, s.Held)
	require.Zero(t, s.HeldBytes)
	require.EqualValues(t, 3, s.Released)
	// The owner comes back to an empty cache: a miss, no harm.
	it := c.Get()
	c.Reclaim()
	require.EqualValues(t, 4, c.Stats().Misses)
	c.Put(it)

	// An owner that keeps taking is never released.
	for range 20 {
		c.Put(c.Get())
		c.Park()
		c.sweep(sweepEvery)
	}
	c.Reclaim()
	require.EqualValues(t, 1, c.Stats().Held)
}

// TestIdleReleaseBySweeper: the package's own sweeper goroutine releases
// a parked cache (no timing asserted: it waits as long as it takes).
func TestIdleReleaseBySweeper(t *testing.T) {
	cfg := bufConfig(4096, 8, 0)
	cfg.IdleAfter = time.Millisecond
	c := New(cfg)
	c.Put(c.Get())
	c.Park()
	require.Eventually(t, func() bool { return c.Stats().Held == 0 }, time.Minute, 10*time.Millisecond)
	require.EqualValues(t, 1, c.Stats().Released)
	c.Close()
}

// TestReuseWhileReferencedIsCaught: with poisoning on, a write through a
// reference kept after Free or Put is caught when the item is next taken.
func TestReuseWhileReferencedIsCaught(t *testing.T) {
	for _, back := range []string{"put", "free"} {
		t.Run(back, func(t *testing.T) {
			c := New(poisoned(bufConfig(256, 4, 0)))
			defer c.Close()
			it := c.Get()
			stale := it.V.b // a reference that outlives the give-back
			if back == "put" {
				c.Put(it)
			} else {
				it.Free()
			}
			stale[100] = 1 // the bug: writing into a buffer after giving it back
			require.PanicsWithValue(t, "cache test: an item was written after it was freed (a reference outlived Put or Free)", func() { c.Get() })
		})
	}
	// Without the bug, poisoned items come and go.
	c := New(poisoned(bufConfig(256, 4, 0)))
	defer c.Close()
	for range 10 {
		it := c.Get()
		it.V.b[0] = 7
		it.Free()
	}
}

func TestGiveBackTwicePanics(t *testing.T) {
	c := New(bufConfig(16, 4, 0))
	defer c.Close()
	it := c.Get()
	c.Put(it)
	require.Panics(t, func() { c.Put(it) })
	require.Panics(t, func() { it.Free() })
	other := New(bufConfig(16, 4, 0))
	defer other.Close()
	require.Panics(t, func() { other.Put(c.Get()) })
}

// TestConcurrentOwnerAndFreers runs the owner (Get, Put, Reclaim, Park)
// against goroutines that free what it hands them while the sweeper may
// visit, and checks that no item is ever held by two at once. Run it with
// -race.
func TestConcurrentOwnerAndFreers(t *testing.T) {
	cfg := poisoned(bufConfig(128, 16, 0))
	cfg.IdleAfter = time.Millisecond // the sweeper releases parked items too
	c := New(cfg)
	defer c.Close()
	take := func(it *Item[buf]) {
		if it.V.holder.Swap(true) {
			t.Error("an item is held twice")
		}
		it.V.b[0] = 1
	}
	drop := func(it *Item[buf]) { it.V.holder.Store(false) }
	handoff := make(chan *Item[buf], 64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for it := range handoff {
				drop(it)
				it.Free()
			}
		})
	}
	for i := range 20000 {
		it := c.Get()
		take(it)
		if i%3 == 0 {
			drop(it)
			c.Put(it)
		} else {
			handoff <- it // freed by another goroutine
		}
		if i%64 == 0 {
			c.Reclaim()
		}
		if i%1000 == 0 {
			c.Park()
		}
	}
	close(handoff)
	wg.Wait()
	c.Reclaim()
	s := c.Stats()
	require.LessOrEqual(t, s.Held, int64(16))
	require.GreaterOrEqual(t, s.Held, int64(0))
	require.EqualValues(t, 20000, s.Hits+s.Misses)
}

func TestClose(t *testing.T) {
	c := New(bufConfig(16, 4, 0))
	a, b := c.Get(), c.Get()
	c.Put(a)
	c.Close()
	c.Close()
	s := c.Stats()
	require.Zero(t, s.Held)
	require.EqualValues(t, 1, s.Released)
	b.Free() // an item out at Close is dropped when it comes back
	require.Zero(t, c.Stats().Held)
	require.EqualValues(t, 1, c.Stats().Overflow)
}

// TestSteadyStateAllocs: taking and giving back, by the owner or through
// the return list, allocates nothing once the cache is warm.
func TestSteadyStateAllocs(t *testing.T) {
	c := New(bufConfig(2048, 8, 0))
	defer c.Close()
	c.Put(c.Get())
	require.Zero(t, testing.AllocsPerRun(1000, func() { c.Put(c.Get()) }))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		c.Get().Free()
		c.Reclaim()
	}))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		c.Park()
		c.Put(c.Get())
	}))
}
