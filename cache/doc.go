// Package cache is ustack's per-endpoint buffer cache: bounded, owned by
// one side, and fed back by whoever frees.
//
// It is built on the lesson of Linux's per-socket skb cache (added in 2019,
// removed in 2021): a cache per socket held memory per socket, did not help
// fast flows, broke on buffers that carried state and moved contention to
// the next allocator; what lasted was returning freed buffers to the side
// that allocated them, in batches, with a cap. Go's sync.Pool has the
// allocator's asymmetry (taken on one P, put on another, stolen across Ps)
// and is emptied by every other garbage collection.
//
// A Cache has an owner: one goroutine at a time (a link queue's receive
// round, a TX queue's lock holder, an accept loop). The owner takes and
// puts items with no synchronisation on its free list. Any other goroutine
// that is done with an item calls Item.Free, which pushes it onto the
// cache's lock-free return list; the owner takes that list back with
// Reclaim, once per poll round, not once per item. The cache holds at most
// MaxItems items and MaxBytes bytes; what would exceed that is dropped to
// the garbage collector and counted as overflow. An owner that is about to
// block calls Park, which hands its free list to the return list; if the
// owner does not come back within IdleAfter, the package's sweeper releases
// it, so an idle endpoint holds no memory.
//
// Only items the caller owns exclusively may be put or freed: each is reset
// on its way in (Config.Reset), and with Config.Poison set, each is
// poisoned on its way in and checked on its way out, so a write through a
// reference kept after Free is caught (panic) at the next Get.
//
// The package imports nothing of ustack's.
package cache
