package sched

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func (q *Qdisc) setRunningLocked(r bool) {
	q.running = r
	q.runningHint.Store(r)
	if !r && q.closeWaits {
		q.idle.Broadcast()
	}
}

// run sends for everybody until the queue is empty, the quota is spent or
// the link is full. The caller owns the running token and does not hold
// the root lock. first, if not nil, is an accepted packet (the discipline
// holding a reference) to send ahead of the queue.
func (q *Qdisc) run(first *stack.PacketBuffer) {
	if first != nil {
		q.batch.PushBack(first)
	} else {
		q.root.lock(q.profile)
		if !q.fillLocked(q.quota) {
			return
		}
		q.root.unlock()
	}
	sent := 0
	for {
		n, full, seq := q.xmit()
		// xmit returns with the root lock held.
		sent += n
		switch {
		case q.closed:
			q.setRunningLocked(false)
			q.root.unlock()
			return
		case full && q.writable.Load() == seq:
			// The link is full and has not signalled room since the write:
			// park the token until it does (or, for links that cannot
			// signal, until a timer fires).
			q.linkFull++
			q.parked, q.waitLink = true, true
			q.root.unlock()
			if !q.notifies {
				q.kickTX()
			}
			return
		case sent >= q.quota && q.fifo.len() > 0:
			// Quota spent: the background goroutine sends the rest, so no
			// caller is held hostage for everybody's traffic.
			q.handoffs++
			q.parked = true
			q.root.unlock()
			q.kickTX()
			return
		}
		budget := q.quota - sent
		if budget <= 0 {
			budget = q.quota
		}
		if !q.fillLocked(budget) {
			return
		}
		q.root.unlock()
	}
}

// fillLocked moves up to budget packets from the queue into the runner's
// batch. If there is nothing to send it releases the token and the root
// lock and returns false; otherwise it returns true with the lock held.
func (q *Qdisc) fillLocked(budget int) bool {
	if q.closed || q.fifo.len() == 0 {
		q.setRunningLocked(false)
		q.root.unlock()
		return false
	}
	k := min(budget, q.batchMax, q.fifo.len())
	for range k {
		q.batch.PushBack(q.fifo.popFront())
	}
	q.backlogHint.Store(int32(q.fifo.len()))
	q.signalRoomLocked()
	return true
}

// xmit writes the runner's batch without the root lock, then takes the
// lock and accounts for the outcome: sent packets are released, packets
// the link refused for lack of room go back to the head of the queue, and
// packets it failed are dropped. It returns how many were sent, whether the
// link was full, and the writability count read before the write.
func (q *Qdisc) xmit() (sent int, full bool, seq uint64) {
	pkts := q.batch.AsSlice()
	bytes := 0
	for _, p := range pkts {
		bytes += p.Size()
	}
	seq = q.writable.Load()
	n, err := q.lower.WritePackets(q.batch)
	n = min(max(n, 0), len(pkts))
	var linkDrops uint64
	q.requeue = q.requeue[:0]
	if n < len(pkts) {
		switch err.(type) {
		case *tcpip.ErrNoBufferSpace, *tcpip.ErrWouldBlock, nil:
			full = true
		case *tcpip.ErrClosedForSend:
			// The link is gone: nothing of this batch will ever leave.
			linkDrops = uint64(len(pkts) - n)
		default:
			// One packet failed; the rest were not tried.
			linkDrops = 1
		}
		for _, p := range pkts[n+int(linkDrops):] {
			q.requeue = append(q.requeue, p.IncRef())
		}
		for _, p := range pkts[n:] {
			bytes -= p.Size()
		}
	}
	// Release the discipline's references to what left or was dropped; the
	// requeued packets keep the ones taken just above.
	q.batch.Reset()
	if q.hookBeforeRecheck != nil {
		q.hookBeforeRecheck()
	}
	q.root.lock(q.profile)
	q.batches++
	q.sent += uint64(n)
	q.bytes += uint64(bytes)
	q.dropped.Link += linkDrops
	if len(q.requeue) > 0 {
		q.fifo.pushFront(q.requeue)
		q.backlogHint.Store(int32(q.fifo.len()))
		q.requeued += uint64(len(q.requeue))
		clear(q.requeue)
		if linkDrops > 0 {
			// Not a full link: retry the rest at once.
			full = false
		}
	}
	return n, full, seq
}

// onWritable is the link's signal that it has room again.
func (q *Qdisc) onWritable() {
	q.writable.Add(1)
	q.kickTX()
}

func (q *Qdisc) kickTX() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// txLoop is the background goroutine, Linux's TX softirq: it picks up a
// parked token, after a quota hand-off, a writability signal, or a timed
// retry of a link that cannot signal.
func (q *Qdisc) txLoop() {
	defer close(q.done)
	var timer *time.Timer
	for {
		select {
		case <-q.kick:
		case <-q.stop:
			return
		}
		q.root.lock(q.profile)
		if !q.parked || q.closed {
			q.root.unlock()
			continue
		}
		if q.waitLink && !q.notifies {
			q.root.unlock()
			if timer == nil {
				timer = time.NewTimer(q.retry)
			} else {
				timer.Reset(q.retry)
			}
			select {
			case <-timer.C:
			case <-q.stop:
				timer.Stop()
				return
			}
			q.root.lock(q.profile)
			if !q.parked || q.closed {
				q.root.unlock()
				continue
			}
			q.retries++
		}
		q.parked, q.waitLink = false, false
		q.root.unlock()
		q.run(nil)
	}
}
