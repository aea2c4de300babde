package impair

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/sched"
)

// cacheReporter is implemented by endpoints with buffer caches (afpacket,
// tun); the wrapper passes it through.
type cacheReporter interface{ CacheStats() cache.Stats }

// errReporter is implemented by endpoints that can fail for good (the
// device went away); the wrapper passes it through.
type errReporter interface{ Err() error }

// SetCoalescing implements link.Coalescer by passing the call through; a
// wrapped endpoint that merges nothing has nothing to turn off.
func (e *Endpoint) SetCoalescing(on bool) {
	if e.merger != nil {
		e.merger.SetCoalescing(on)
	}
}

// GSOMaxSize implements stack.GSOEndpoint: the wrapped endpoint's limit.
func (e *Endpoint) GSOMaxSize() uint32 {
	if e.gso != nil {
		return e.gso.GSOMaxSize()
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: the wrapped endpoint's GSO.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.gso != nil {
		return e.gso.SupportedGSO()
	}
	return stack.GSONotSupported
}

// BusyPollBegin implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollBegin() {
	if e.source != nil {
		e.source.BusyPollBegin()
	}
}

// BusyPoll implements poll.Source: the wrapped endpoint's round delivers
// to the wrapper, which applies the receive impairments as for any other
// delivery. 0 if the wrapped endpoint cannot be polled.
func (e *Endpoint) BusyPoll() int {
	if e.source != nil {
		return e.source.BusyPoll()
	}
	return 0
}

// BusyPollEnd implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollEnd() {
	if e.source != nil {
		e.source.BusyPollEnd()
	}
}

// BusyPollWatchdog implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollWatchdog() bool {
	if e.source != nil {
		return e.source.BusyPollWatchdog()
	}
	return false
}

// NotifyWritable implements sched.WritableNotifier. The wrapped
// endpoint's signal is passed through; if it has none, the wrapper calls
// f from a timer sched.DefaultRetryInterval after each write it refused.
func (e *Endpoint) NotifyWritable(f func()) {
	if e.notifier != nil {
		e.notifier.NotifyWritable(f)
		return
	}
	e.writableMu.Lock()
	e.writable = f
	e.writableMu.Unlock()
}

// NotifyRounds implements sched.RoundNotifier by handing the hooks to the
// wrapped endpoint, whose receive rounds deliver through the wrapper: what
// their delivery writes still leaves in one flush at the round's end.
// Packets the wrapper delays arrive later from its delay line, outside any
// round, and their replies leave as ordinary writes. Over an endpoint
// without rounds the hooks are never called, as for any such link.
func (e *Endpoint) NotifyRounds(begin, end func()) {
	if e.rounds != nil {
		e.rounds.NotifyRounds(begin, end)
	}
}

// refused arms the writability timer after a refused write when the
// wrapped endpoint cannot signal.
func (e *Endpoint) refused() {
	if e.notifier != nil {
		return
	}
	e.writableMu.Lock()
	defer e.writableMu.Unlock()
	if e.writable == nil || e.life.Closed() {
		return
	}
	if e.retry == nil {
		e.retry = time.AfterFunc(sched.DefaultRetryInterval, e.signalWritable)
	} else {
		e.retry.Reset(sched.DefaultRetryInterval)
	}
}

func (e *Endpoint) signalWritable() {
	e.writableMu.Lock()
	f := e.writable
	e.writableMu.Unlock()
	if f != nil {
		f()
	}
}

// CacheStats returns the wrapped endpoint's buffer cache counters, zero if
// it keeps none.
func (e *Endpoint) CacheStats() cache.Stats {
	if e.caches != nil {
		return e.caches.CacheStats()
	}
	return cache.Stats{}
}

// Err returns the wrapped endpoint's error (the device went away, say),
// nil if it reports none.
func (e *Endpoint) Err() error {
	if e.errs != nil {
		return e.errs.Err()
	}
	return nil
}
