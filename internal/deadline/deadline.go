// Package deadline is the one deadline of every conn in ustack (package
// stack's conns, forward's flows, wgnet's sockets): one direction's
// deadline as a channel that is closed when it passes, so a waiting call
// selects on it, the shape of gonet's deadlineTimer, plus a check that
// takes no lock, for the fast paths that must not wait at all.
package deadline

import (
	"sync"
	"sync/atomic"
	"time"
)

// Deadline is one direction's deadline (read or write) of a conn. The
// zero value has none. It is safe for concurrent use.
type Deadline struct {
	at atomic.Int64 // the deadline in Unix nanoseconds; 0: none

	mu     sync.Mutex // guards the fields below
	c      chan struct{}
	closed bool // c is closed
	timer  *time.Timer
	gen    uint64 // which Set the timer belongs to
}

// Done returns a channel that is closed when the deadline passes. A Set
// after it passed replaces the channel: take it anew for each wait.
func (d *Deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c == nil {
		d.c = make(chan struct{})
	}
	return d.c
}

// Passed reports whether the deadline is set and has passed, without
// taking a lock: the check a non-blocking fast path makes before it
// goes ahead.
func (d *Deadline) Passed() bool {
	at := d.at.Load()
	return at != 0 && time.Now().UnixNano() >= at
}

// IsSet reports whether a deadline is set, passed or not.
func (d *Deadline) IsSet() bool { return d.at.Load() != 0 }

// Set moves the deadline to t; a zero t means none.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
	if t.IsZero() {
		d.at.Store(0)
	} else {
		d.at.Store(t.UnixNano())
	}
	if d.c == nil || d.closed {
		d.c, d.closed = make(chan struct{}), false
	}
	if t.IsZero() {
		return
	}
	until := time.Until(t)
	if until <= 0 {
		close(d.c)
		d.closed = true
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(until, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		// A Set after this timer fired, before it took the lock, owns
		// the channel now.
		if d.gen == gen && !d.closed {
			close(d.c)
			d.closed = true
		}
	})
}

// Stop cancels the timer, at the conn's Close; the deadline keeps its
// value.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
}

func (d *Deadline) stopLocked() {
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
