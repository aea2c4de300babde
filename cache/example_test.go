package cache_test

import (
	"fmt"

	"github.com/ustack-dev/ustack/cache"
)

// A cache of receive buffers owned by one goroutine (a link queue's
// receive round), whose buffers are freed by whichever goroutine is done
// with them (a socket reader), and reclaimed by the owner once per round.
func Example() {
	c := cache.New(cache.Config[[]byte]{
		Name:  "rx",
		New:   func() []byte { return make([]byte, 0, 2048) },
		Reset: func(b *[]byte) { *b = (*b)[:0] }, // an item comes back empty
		Size:  func(b *[]byte) int { return cap(*b) },
	})
	// Free starts the idle sweeper for this cache; Close stops it.
	defer c.Close()

	// The owner: a miss makes a buffer; Put keeps it for the next Get.
	it := c.Get()
	it.V = append(it.V, "first"...)
	c.Put(it)
	it = c.Get() // a hit: the same buffer, reset
	fmt.Println("reused empty:", len(it.V) == 0)

	// The buffer travels with a packet to another goroutine, which frees
	// it when done: onto the cache's return list, with no lock.
	done := make(chan struct{})
	go func() {
		defer close(done)
		it.Free()
	}()
	<-done

	// The owner takes the return list back in one step, once per round.
	fmt.Println("reclaimed:", c.Reclaim())
	s := c.Stats()
	fmt.Printf("hits %d, misses %d, returns %d, held %d (%d bytes)\n", s.Hits, s.Misses, s.Returns, s.Held, s.HeldBytes)
	// Output:
	// reused empty: true
	// reclaimed: 1
	// hits 1, misses 1, returns 1, held 1 (2048 bytes)
}
