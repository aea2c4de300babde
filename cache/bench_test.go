package cache

import (
	"sync"
	"testing"
)

// benchSize is a landing buffer for a full-size Ethernet frame with a
// virtio-net header, rounded up.
const benchSize = 2048

var sink []byte

// BenchmarkOwner: the owner takes a buffer and gives it back itself (a
// link's RX round or TX call). off allocates each time, as without a
// cache; pool is sync.Pool, the global alternative.
func BenchmarkOwner(b *testing.B) {
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(benchSize)
		for b.Loop() {
			sink = make([]byte, benchSize)
		}
	})
	b.Run("pool", func(b *testing.B) {
		p := sync.Pool{New: func() any { return new(buf) }}
		b.ReportAllocs()
		b.SetBytes(benchSize)
		for b.Loop() {
			x := p.Get().(*buf)
			if x.b == nil {
				x.b = make([]byte, benchSize)
			}
			sink = x.b
			p.Put(x)
		}
	})
	b.Run("on", func(b *testing.B) {
		c := New(bufConfig(benchSize, 0, 0))
		defer c.Close()
		b.ReportAllocs()
		b.SetBytes(benchSize)
		for b.Loop() {
			it := c.Get()
			sink = it.V.b
			c.Put(it)
		}
	})
}

// BenchmarkCrossGoroutine: the owner takes buffers and hands them to
// another goroutine, which is done with them (a conn buffer freed by the
// conn's goroutine, say). on frees onto the return list and the owner
// reclaims once per batch of 64; pool puts back into sync.Pool from the
// other goroutine (its P's cache, not the owner's).
func BenchmarkCrossGoroutine(b *testing.B) {
	const batch = 64
	run := func(b *testing.B, get func() any, done func(any), round func()) {
		ch, back := make(chan []any, 4), make(chan []any, 8)
		for range cap(back) {
			back <- make([]any, 0, batch)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for xs := range ch {
				for _, x := range xs {
					done(x)
				}
				back <- xs[:0]
			}
		})
		b.ReportAllocs()
		b.SetBytes(benchSize)
		xs := <-back
		for b.Loop() {
			xs = append(xs, get())
			if len(xs) == batch {
				ch <- xs
				round()
				xs = <-back
			}
		}
		close(ch)
		wg.Wait()
	}
	b.Run("off", func(b *testing.B) {
		run(b, func() any { return make([]byte, benchSize) }, func(any) {}, func() {})
	})
	b.Run("pool", func(b *testing.B) {
		p := sync.Pool{New: func() any { return &buf{b: make([]byte, benchSize)} }}
		run(b, func() any { return p.Get() }, func(x any) { p.Put(x) }, func() {})
	})
	b.Run("on", func(b *testing.B) {
		c := New(bufConfig(benchSize, 16*batch, 0))
		defer c.Close()
		run(b, func() any { return c.Get() }, func(x any) { x.(*Item[buf]).Free() }, func() { c.Reclaim() })
	})
}
