package linkutil

import "sync/atomic"

// Rounds holds the round hooks a queueing discipline registered through
// sched.RoundNotifier, for a link whose receive loop delivers in rounds.
// Registration may race a running receive loop (a discipline is built
// for a link that may already be attached), so the hooks are swapped
// atomically. The zero value has no hooks and costs one atomic load per
// round.
type Rounds struct {
	hooks atomic.Pointer[roundHooks]
}

type roundHooks struct{ begin, end func() }

// Set implements sched.RoundNotifier's NotifyRounds for the link that
// embeds r: begin and end are called around each round that delivers at
// least one packet. Nil functions remove the hooks.
func (r *Rounds) Set(begin, end func()) {
	if begin == nil || end == nil {
		r.hooks.Store(nil)
		return
	}
	r.hooks.Store(&roundHooks{begin, end})
}

// Begin is called by the receive loop before it delivers a round's first
// packet. It returns the function to call after the round's last packet
// (always, whatever the round's outcome), or nil when no discipline
// listens.
func (r *Rounds) Begin() (end func()) {
	h := r.hooks.Load()
	if h == nil {
		return nil
	}
	h.begin()
	return h.end
}
