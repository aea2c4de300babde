package sched

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// newQdisc builds one of our disciplines.
func newQdisc(strat strategy, lower stack.LinkWriter, o Options) (*Qdisc, error) {
	switch {
	case o.Quota < 1:
		return nil, fmt.Errorf("qdisc %s: quota %d: must be at least 1", strategyNames[strat], o.Quota)
	case o.Batch < 1:
		return nil, fmt.Errorf("qdisc %s: batch %d: must be at least 1", strategyNames[strat], o.Batch)
	case o.MaxBurst < 1:
		return nil, fmt.Errorf("qdisc %s: max burst %d: must be at least 1", strategyNames[strat], o.MaxBurst)
	}
	q := &Qdisc{
		strat:    strat,
		lower:    lower,
		limit:    o.Limit,
		quota:    o.Quota,
		batchMax: min(o.Batch, o.Quota),
		maxBurst: o.MaxBurst,
		retry:    o.RetryInterval,
		profile:  !o.NoProfile,
		handOff:  o.HandOff,
		fifo:     newPktRing(o.Limit + min(o.Batch, o.Quota)),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	q.root.name, q.busy.name, q.enq.name = "root", "busylock", "enqueue"
	q.idle.L = &q.root.mu
	if n, ok := lower.(WritableNotifier); ok {
		q.notifies = true
		n.NotifyWritable(q.onWritable)
	}
	if n, ok := lower.(RoundNotifier); ok {
		n.NotifyRounds(q.beginRound, q.endRound)
	}
	go q.txLoop()
	return q, nil
}

// Close implements stack.QueueingDiscipline. It refuses further packets,
// waits for a runner in the middle of a batch, releases every queued packet
// (counted in Dropped.Closed) and joins the background goroutine. It is
// idempotent.
func (q *Qdisc) Close() {
	q.closeMu.Lock()
	defer q.closeMu.Unlock()
	q.root.mu.Lock()
	if q.closed {
		q.root.mu.Unlock()
		return
	}
	q.closed = true
	q.closeWaits = true
	// Writers waiting for room learn at once that none will come.
	q.signalRoomLocked()
	// A token parked, or held for a receive round, has nobody sending to
	// wait for; the round's end then finds the discipline closed.
	for q.running && !q.parked && !q.inRound {
		q.idle.Wait()
	}
	q.setRunningLocked(false)
	q.parked, q.waitLink, q.inRound = false, false, false
	var release []*stack.PacketBuffer
	for q.fifo.len() > 0 {
		release = append(release, q.fifo.popFront())
	}
	q.dropped.Closed += uint64(len(release))
	q.backlogHint.Store(0)
	q.signalRoomLocked()
	q.root.mu.Unlock()
	for _, p := range release {
		p.DecRef()
	}
	close(q.stop)
	<-q.done
}
