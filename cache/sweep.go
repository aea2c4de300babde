package cache

import (
	"sync"
	"time"
)

// sweepEvery is how often the sweeper visits the caches: a quarter of
// DefaultIdleAfter, so an idle cache is released between IdleAfter and
// IdleAfter plus a quarter, and an idle process wakes four times a second
// only while some cache exists.
const sweepEvery = DefaultIdleAfter / 4

// sweepable is a cache as the sweeper sees it.
type sweepable interface{ sweep(elapsed time.Duration) }

// sweeper is the package's one background goroutine. The first cache
// with an idle limit starts it, the last one's Close stops and joins it.
type sweeper struct {
	mu     sync.Mutex // guards caches, stop and done; held while sweeping
	caches map[sweepable]struct{}
	stop   chan struct{} // nil while no goroutine runs
	done   chan struct{}
}

var sweep sweeper

func (s *sweeper) add(c sweepable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caches == nil {
		s.caches = make(map[sweepable]struct{})
	}
	s.caches[c] = struct{}{}
	if s.stop == nil {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.loop(s.stop, s.done)
	}
}

func (s *sweeper) remove(c sweepable) {
	s.mu.Lock()
	delete(s.caches, c)
	if len(s.caches) > 0 || s.stop == nil {
		s.mu.Unlock()
		return
	}
	close(s.stop)
	done := s.done
	s.stop, s.done = nil, nil
	s.mu.Unlock()
	<-done
}

// loop is the sweeper goroutine: it visits every cache each sweepEvery
// until stop is closed.
func (s *sweeper) loop(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		for c := range s.caches {
			c.sweep(sweepEvery)
		}
		s.mu.Unlock()
	}
}
