package linkutil

import (
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

var (
	_ stack.GSOEndpoint      = (*Passthrough)(nil)
	_ poll.Source            = (*Passthrough)(nil)
	_ sched.WritableNotifier = (*Passthrough)(nil)
	_ sched.RoundNotifier    = (*Passthrough)(nil)
	_ link.Reporter          = (*Passthrough)(nil)
	_ link.Coalescer         = (*Passthrough)(nil)
	_ link.CacheReporter     = (*Passthrough)(nil)
	_ link.ErrReporter       = (*Passthrough)(nil)
)

// Passthrough is the one way a wrapper endpoint (link/impair, link/pcap)
// stays transparent (STYLE rule 17): embedded in it, it implements every
// optional interface that link/doc.go lists and passes each call to the
// wrapped endpoint, found once by type assertion. Where the wrapped
// endpoint lacks one, the method reports what an endpoint without it
// would: no GSO, no busy-poll rounds, no round hooks called, zero
// counters, no error. The writability signal alone cannot be absent once
// offered (a discipline that finds it waits for it), so without the
// wrapped endpoint's signal the wrapper signals from a timer,
// sched.DefaultRetryInterval after each write refused (Refused).
//
// A wrapper with more to say overrides a method (impair adds its fault
// counters to LinkStats). Build it with NewPassthrough; it is safe for
// concurrent use.
type Passthrough struct {
	source   poll.Source
	notifier sched.WritableNotifier
	rounds   sched.RoundNotifier
	reporter link.Reporter
	merger   link.Coalescer
	caches   link.CacheReporter
	errs     link.ErrReporter
	gso      stack.GSOEndpoint
	retry    *retrySignal // nil when notifier is not
}

// retrySignal is the writability signal of a wrapper whose wrapped
// endpoint has none.
type retrySignal struct {
	mu      sync.Mutex
	f       func() // the discipline's callback; nil before NotifyWritable and after Stop
	timer   *time.Timer
	stopped bool
}

// NewPassthrough finds lower's optional interfaces.
func NewPassthrough(lower stack.LinkEndpoint) Passthrough {
	var p Passthrough
	p.source, _ = lower.(poll.Source)
	p.notifier, _ = lower.(sched.WritableNotifier)
	p.rounds, _ = lower.(sched.RoundNotifier)
	p.reporter, _ = lower.(link.Reporter)
	p.merger, _ = lower.(link.Coalescer)
	p.caches, _ = lower.(link.CacheReporter)
	p.errs, _ = lower.(link.ErrReporter)
	p.gso, _ = lower.(stack.GSOEndpoint)
	if p.notifier == nil {
		p.retry = &retrySignal{}
	}
	return p
}

// Refused tells p that the wrapped endpoint refused some of a write: if
// it cannot signal writability itself, p's timer will.
func Refused(p *Passthrough) {
	r := p.retry
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || r.stopped {
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(sched.DefaultRetryInterval, r.signal)
	} else {
		r.timer.Reset(sched.DefaultRetryInterval)
	}
}

// StopPassthrough stops p's writability timer, if any, and forgets the
// callback: the wrapper is closing. A signal already firing may still
// run once.
func StopPassthrough(p *Passthrough) {
	r := p.retry
	if r == nil {
		return
	}
	r.mu.Lock()
	r.stopped = true
	r.f = nil
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
}

func (r *retrySignal) signal() {
	r.mu.Lock()
	f := r.f
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// GSOMaxSize implements stack.GSOEndpoint: the wrapped endpoint's limit,
// 0 without GSO.
func (p *Passthrough) GSOMaxSize() uint32 {
	if p.gso != nil {
		return p.gso.GSOMaxSize()
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: the wrapped endpoint's GSO,
// GSONotSupported without it.
func (p *Passthrough) SupportedGSO() stack.SupportedGSO {
	if p.gso != nil {
		return p.gso.SupportedGSO()
	}
	return stack.GSONotSupported
}

// BusyPollBegin implements poll.Source by passing the call through.
func (p *Passthrough) BusyPollBegin() {
	if p.source != nil {
		p.source.BusyPollBegin()
	}
}

// BusyPoll implements poll.Source: the wrapped endpoint's round, which
// delivers through the wrapper as any other delivery does; 0 if the
// wrapped endpoint cannot be polled.
func (p *Passthrough) BusyPoll() int {
	if p.source != nil {
		return p.source.BusyPoll()
	}
	return 0
}

// BusyPollEnd implements poll.Source by passing the call through.
func (p *Passthrough) BusyPollEnd() {
	if p.source != nil {
		p.source.BusyPollEnd()
	}
}

// BusyPollWatchdog implements poll.Source by passing the call through;
// false (nobody polls) if the wrapped endpoint cannot be polled.
func (p *Passthrough) BusyPollWatchdog() bool {
	if p.source != nil {
		return p.source.BusyPollWatchdog()
	}
	return false
}

// NotifyWritable implements sched.WritableNotifier: the wrapped
// endpoint's signal, or p's timer after each write refused (Refused).
func (p *Passthrough) NotifyWritable(f func()) {
	if p.notifier != nil {
		p.notifier.NotifyWritable(f)
		return
	}
	p.retry.mu.Lock()
	if !p.retry.stopped {
		p.retry.f = f
	}
	p.retry.mu.Unlock()
}

// NotifyRounds implements sched.RoundNotifier by handing the hooks to the
// wrapped endpoint, whose receive rounds deliver through the wrapper, so
// that what their delivery writes still leaves in one flush at the
// round's end. Over an endpoint without rounds the hooks are never
// called, as for any such link.
func (p *Passthrough) NotifyRounds(begin, end func()) {
	if p.rounds != nil {
		p.rounds.NotifyRounds(begin, end)
	}
}

// LinkStats implements link.Reporter: the wrapped endpoint's counters,
// zero if it keeps none.
func (p *Passthrough) LinkStats() link.Stats {
	if p.reporter != nil {
		return p.reporter.LinkStats()
	}
	return link.Stats{}
}

// SetCoalescing implements link.Coalescer by passing the call through; a
// wrapped endpoint that merges nothing has nothing to turn off.
func (p *Passthrough) SetCoalescing(on bool) {
	if p.merger != nil {
		p.merger.SetCoalescing(on)
	}
}

// CacheStats implements link.CacheReporter: the wrapped endpoint's buffer
// cache counters, zero if it keeps none.
func (p *Passthrough) CacheStats() cache.Stats {
	if p.caches != nil {
		return p.caches.CacheStats()
	}
	return cache.Stats{}
}

// Err implements link.ErrReporter: the wrapped endpoint's error (its
// device went away, say), nil if it reports none.
func (p *Passthrough) Err() error {
	if p.errs != nil {
		return p.errs.Err()
	}
	return nil
}
