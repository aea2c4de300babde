package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
)

const (
	// DefaultMaxItems is the item cap when Config.MaxItems is 0: 64 is one
	// RX round or one TX batch of the links (NAPI_POLL_WEIGHT), so a round
	// that frees everything it took fits back.
	DefaultMaxItems = 64
	// DefaultMaxBytes is the byte cap when Config.MaxBytes is 0: 4 MiB, 64
	// buffers of 64 KiB, the largest packet a link lands.
	DefaultMaxBytes = 4 << 20
	// DefaultIdleAfter is how long a parked cache keeps its items when
	// Config.IdleAfter is 0: 2 s is ten times TCP's minimum RTO, so a
	// request-response flow that pauses between transactions keeps its
	// buffers, while an endpoint that has gone quiet gives them back within
	// a few seconds.
	DefaultIdleAfter = 2 * time.Second
)

// Config describes a Cache's items and bounds. New is required; the rest
// is optional.
type Config[T any] struct {
	// Name names the cache in messages.
	Name string
	// New makes a fresh item on a miss.
	New func() T
	// Reset restores an item to the state New gives, dropping every
	// reference it holds into other memory. It runs on the goroutine that
	// puts or frees the item, before the item enters the cache.
	Reset func(*T)
	// Size returns an item's size in bytes, for MaxBytes and the
	// HeldBytes counter; nil counts every item as 0 bytes.
	Size func(*T) int
	// Poison, if set, is applied to every item that enters the cache, and
	// Check must then report whether the poison is intact when the item
	// leaves it: a failed Check means someone wrote to the item after
	// freeing it, and Get panics. It costs a pass over the item each way:
	// for tests and debugging.
	Poison func(*T)
	Check  func(*T) bool
	// MaxItems and MaxBytes cap what the cache holds (its owner's free
	// list and its return list together); 0 means DefaultMaxItems and
	// DefaultMaxBytes. What would exceed them is dropped and counted in
	// Overflow.
	MaxItems, MaxBytes int
	// IdleAfter is how long a parked cache may go without its owner
	// taking anything before what it holds is released; 0 means
	// DefaultIdleAfter, a negative value never.
	IdleAfter time.Duration
}

// Item is one cached object. V is the owner's to use between Get and Put
// or Free; after that the item is the cache's, and neither V nor anything
// it points to may be touched.
type Item[T any] struct {
	V    T
	c    *Cache[T]
	next *Item[T] // the free list or the return list
	size int      // Size(V) when it entered the cache
	// out is true while the item is given out. It is not atomic: whoever
	// holds the item owns it, and the return list's atomics order the
	// hand-overs.
	out bool
}

// Free gives the item back to its cache from any goroutine: it is reset
// and pushed onto the cache's return list, where the owner's next Reclaim
// finds it. The caller must own the item exclusively and not touch it
// afterwards. Freeing an item twice panics.
func (it *Item[T]) Free() { it.c.giveBack(it) }

// Stats are a cache's counters. Hits and Misses count Get calls that
// found an item or had to make one; Returns counts items that came
// back through Free; Overflow counts items dropped because the cache was
// full; Released counts items released because the cache was idle or
// closed. Held and HeldBytes are what the cache holds. The owner's share
// is published at each Reclaim and Park, so the counters may lag its
// current round.
type Stats struct {
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	Returns   uint64 `json:"returns"`
	Overflow  uint64 `json:"overflow"`
	Released  uint64 `json:"released"`
	Held      int64  `json:"held"`
	HeldBytes int64  `json:"held_bytes"`
}

// Add adds o's counters to s, for totals over several caches.
func (s *Stats) Add(o Stats) {
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.Returns += o.Returns
	s.Overflow += o.Overflow
	s.Released += o.Released
	s.Held += o.Held
	s.HeldBytes += o.HeldBytes
}

// Sub returns the counters of s less those of an earlier snapshot; Held
// and HeldBytes stay s's own.
func (s Stats) Sub(o Stats) Stats {
	s.Hits -= o.Hits
	s.Misses -= o.Misses
	s.Returns -= o.Returns
	s.Overflow -= o.Overflow
	s.Released -= o.Released
	return s
}

// Cache is a bounded cache of items of one kind with one owner. Get, Put,
// Reclaim and Park belong to the owner: one goroutine at a time, or several
// that hand the role over through a lock (the owner's side is not
// synchronised: a hit or a put is a few plain loads and stores). Free,
// Stats and Close are safe from any goroutine.
//
// It holds at most MaxItems items and MaxBytes bytes after every Reclaim;
// between two, frees from other goroutines are bounded by the same caps
// against what the owner held at its last Reclaim.
type Cache[T any] struct {
	cfg       Config[T]
	maxItems  int64
	maxBytes  int64
	idleAfter time.Duration

	// The owner's side: its free list and counters, published into the
	// pub* atomics at each Reclaim and Park.
	free                     *Item[T]
	nfree, freeBytes         int64
	hits, misses, overflowed uint64

	_ cpu.CacheLinePad
	// The shared side: the return list and its counters.
	ret               atomic.Pointer[Item[T]]
	retN, retBytes    atomic.Int64
	returns, overflow atomic.Uint64
	released          atomic.Uint64
	active, closed    atomic.Bool

	_                           cpu.CacheLinePad
	pubN, pubBytes              atomic.Int64
	pubHits, pubMisses, pubOver atomic.Uint64
	idle                        time.Duration // the sweeper's: time parked without use

	// swept is set once the cache is registered with the sweeper, which
	// happens at its first Park or Free: a cache that only its owner uses
	// has nothing idle to release. sweepMu orders registering against
	// Close.
	swept   atomic.Bool
	sweepMu sync.Mutex
}

// New returns an empty cache. A cache with an idle limit is swept by the
// package's sweeper goroutine from its first Park or Free until Close,
// which must then be called.
func New[T any](cfg Config[T]) *Cache[T] {
	if cfg.New == nil {
		panic("cache: Config.New is nil")
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = DefaultMaxItems
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	c := &Cache[T]{cfg: cfg, maxItems: int64(cfg.MaxItems), maxBytes: int64(cfg.MaxBytes), idleAfter: cfg.IdleAfter}
	if c.idleAfter == 0 {
		c.idleAfter = DefaultIdleAfter
	}
	return c
}

// ensureSwept registers the cache with the sweeper, once, unless it has no
// idle limit or is closed.
func (c *Cache[T]) ensureSwept() {
	if c.idleAfter < 0 || c.swept.Load() {
		return
	}
	c.sweepMu.Lock()
	if !c.closed.Load() && !c.swept.Load() {
		sweep.add(c)
		c.swept.Store(true)
	}
	c.sweepMu.Unlock()
}

// Get takes an item for the owner: from its free list, else from the
// return list (an implicit Reclaim), else a new one (a miss).
func (c *Cache[T]) Get() *Item[T] {
	if c.free == nil && c.ret.Load() != nil {
		c.Reclaim()
	}
	it := c.free
	if it == nil {
		c.misses++
		return c.fresh()
	}
	c.free = it.next
	c.nfree--
	c.freeBytes -= int64(it.size)
	c.hits++
	if !c.active.Load() {
		c.active.Store(true)
	}
	return c.hand(it)
}

// fresh makes a new item, already out.
func (c *Cache[T]) fresh() *Item[T] {
	return &Item[T]{V: c.cfg.New(), c: c, out: true}
}

// hand gives a cached item out.
func (c *Cache[T]) hand(it *Item[T]) *Item[T] {
	it.next = nil
	if c.cfg.Check != nil && !c.cfg.Check(&it.V) {
		panic("cache " + c.cfg.Name + ": an item was written after it was freed (a reference outlived Put or Free)")
	}
	it.out = true
	return it
}

// Put gives an item back from the owner: it is reset and kept on the
// owner's free list, or dropped (overflow) if the cache is full. The owner
// must own the item exclusively and not touch it afterwards.
func (c *Cache[T]) Put(it *Item[T]) {
	c.take(it)
	if c.closed.Load() || c.nfree+c.retN.Load() >= c.maxItems || c.freeBytes+c.retBytes.Load()+int64(it.size) > c.maxBytes {
		c.overflowed++
		return
	}
	c.poison(it)
	it.next = c.free
	c.free = it
	c.nfree++
	c.freeBytes += int64(it.size)
}

// giveBack is Item.Free.
func (c *Cache[T]) giveBack(it *Item[T]) {
	c.take(it)
	c.returns.Add(1)
	if c.closed.Load() {
		c.overflow.Add(1)
		return
	}
	own := c.pubN.Load()
	if c.retN.Add(1)+own > c.maxItems {
		c.retN.Add(-1)
		c.overflow.Add(1)
		return
	}
	if c.retBytes.Add(int64(it.size))+c.pubBytes.Load() > c.maxBytes {
		c.retBytes.Add(-int64(it.size))
		c.retN.Add(-1)
		c.overflow.Add(1)
		return
	}
	c.poison(it)
	c.ensureSwept()
	for {
		old := c.ret.Load()
		it.next = old
		if c.ret.CompareAndSwap(old, it) {
			return
		}
	}
}

// take checks that it is given back to its own cache once, then resets it
// and measures it.
func (c *Cache[T]) take(it *Item[T]) {
	if it.c != c {
		panic("cache " + c.cfg.Name + ": an item given back to a cache it does not belong to")
	}
	if !it.out {
		panic("cache " + c.cfg.Name + ": an item given back twice")
	}
	it.out = false
	if c.cfg.Reset != nil {
		c.cfg.Reset(&it.V)
	}
	it.size = 0
	if c.cfg.Size != nil {
		it.size = c.cfg.Size(&it.V)
	}
}

func (c *Cache[T]) poison(it *Item[T]) {
	if c.cfg.Poison != nil {
		c.cfg.Poison(&it.V)
	}
}

// Reclaim moves the return list onto the owner's free list, trims the
// result to the caps, publishes the owner's counters, and returns how many
// items it moved. Owners call it once per round (Get also does when its
// free list is empty).
func (c *Cache[T]) Reclaim() int {
	n := 0
	if h := c.ret.Swap(nil); h != nil {
		var bytes int64
		t := h
		for {
			n++
			bytes += int64(t.size)
			if t.next == nil {
				break
			}
			t = t.next
		}
		c.retN.Add(-int64(n))
		c.retBytes.Add(-bytes)
		t.next = c.free
		c.free = h
		c.nfree += int64(n)
		c.freeBytes += bytes
		if !c.active.Load() {
			c.active.Store(true)
		}
		// Frees raced with the owner's puts since the last Reclaim: drop
		// what is beyond the caps now.
		for c.free != nil && (c.nfree > c.maxItems || c.freeBytes > c.maxBytes) {
			it := c.free
			c.free = it.next
			it.next = nil
			c.nfree--
			c.freeBytes -= int64(it.size)
			c.overflowed++
		}
	}
	c.publish()
	return n
}

// publish makes the owner's counters visible to Stats and to Free's caps.
func (c *Cache[T]) publish() {
	if c.pubN.Load() != c.nfree {
		c.pubN.Store(c.nfree)
	}
	if c.pubBytes.Load() != c.freeBytes {
		c.pubBytes.Store(c.freeBytes)
	}
	if c.pubHits.Load() != c.hits {
		c.pubHits.Store(c.hits)
	}
	if c.pubMisses.Load() != c.misses {
		c.pubMisses.Store(c.misses)
	}
	if c.pubOver.Load() != c.overflowed {
		c.pubOver.Store(c.overflowed)
	}
}

// Park hands the owner's free list over to the return list, before the
// owner blocks: if it has not taken anything within IdleAfter, the sweeper
// releases it. The owner's next Get or Reclaim takes back what is left.
func (c *Cache[T]) Park() {
	h := c.free
	if h != nil {
		c.ensureSwept()
		t := h
		for t.next != nil {
			t = t.next
		}
		// Count the items on the return list before they are on it, so
		// that its counters never go below what it holds.
		c.retN.Add(c.nfree)
		c.retBytes.Add(c.freeBytes)
		c.free, c.nfree, c.freeBytes = nil, 0, 0
		for {
			old := c.ret.Load()
			t.next = old
			if c.ret.CompareAndSwap(old, h) {
				break
			}
		}
	}
	c.publish()
}

// Stats returns the cache's counters. Safe from any goroutine.
func (c *Cache[T]) Stats() Stats {
	return Stats{
		Hits:      c.pubHits.Load(),
		Misses:    c.pubMisses.Load(),
		Returns:   c.returns.Load(),
		Overflow:  c.pubOver.Load() + c.overflow.Load(),
		Released:  c.released.Load(),
		Held:      c.pubN.Load() + c.retN.Load(),
		HeldBytes: c.pubBytes.Load() + c.retBytes.Load(),
	}
}

// sweep is the sweeper's visit, every elapsed: a cache whose owner has not
// taken anything since the last visit accumulates idle time, and once that
// reaches IdleAfter, what its return list holds (everything, if the owner
// parked) is released.
func (c *Cache[T]) sweep(elapsed time.Duration) {
	if c.active.Swap(false) {
		c.idle = 0
		return
	}
	if c.idle += elapsed; c.idle >= c.idleAfter {
		n, bytes := c.release(c.ret.Swap(nil))
		c.retN.Add(-n)
		c.retBytes.Add(-bytes)
	}
}

// release drops a detached list, counts it and returns its length and
// bytes.
func (c *Cache[T]) release(h *Item[T]) (n, bytes int64) {
	for it := h; it != nil; {
		next := it.next
		it.next = nil
		n++
		bytes += int64(it.size)
		it = next
	}
	c.released.Add(uint64(n))
	return n, bytes
}

// Close releases everything the cache holds and stops its sweeping; items
// given back afterwards are dropped. The owner must have stopped using it.
// It is idempotent.
func (c *Cache[T]) Close() {
	if c.closed.Swap(true) {
		return
	}
	c.sweepMu.Lock()
	if c.swept.Load() {
		sweep.remove(c)
	}
	c.sweepMu.Unlock()
	h := c.free
	c.free, c.nfree, c.freeBytes = nil, 0, 0
	c.release(h)
	n, bytes := c.release(c.ret.Swap(nil))
	c.retN.Add(-n)
	c.retBytes.Add(-bytes)
	c.publish()
}
