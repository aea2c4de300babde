package sched

// beginRound is the RoundNotifier begin hook: the running token, if nobody
// holds it, is held for the link's receive round, so that what the
// round's delivery writes queues for one flush at its end (Linux's
// xmit_more: defer the doorbell, not the packet). If a runner is at work,
// or parked for the background goroutine, it sends what the round writes
// as it would anyway.
func (q *Qdisc) beginRound() {
	q.root.lock(q.profile)
	if !q.running && !q.closed {
		q.setRunningLocked(true)
		q.inRound = true
		q.rounds++
	}
	q.root.unlock()
}

// endRound is the RoundNotifier end hook: if the token is still held for a
// round, the caller becomes the runner and sends what queued meanwhile, in
// batches, as any runner does; an empty queue just releases the token.
// With several receive queues in rounds at once, the first round to end
// flushes for all of them, and the later ones find the token taken or free
// (and their packets sent directly): the deferral is an optimization, never
// a wait.
func (q *Qdisc) endRound() {
	q.root.lock(q.profile)
	if !q.inRound {
		q.root.unlock()
		return
	}
	q.inRound = false
	if q.fifo.len() == 0 {
		q.setRunningLocked(false)
		q.root.unlock()
		return
	}
	q.roundFlushes++
	q.root.unlock()
	q.run(nil)
}

// roundFullLocked reports whether a round holds the token and the queue
// already holds a batch: then the enqueuer that filled it takes the token
// over and sends, rather than the round waiting for more (a round never
// waits to fill a batch, nor holds more than one). It clears inRound for
// the caller, which must then run the queue.
func (q *Qdisc) roundFullLocked() bool {
	if !q.inRound || q.fifo.len() < min(q.batchMax, q.limit) {
		return false
	}
	q.inRound = false
	q.roundFlushes++
	return true
}
