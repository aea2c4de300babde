package sched

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func (q *Qdisc) admit(pkt *stack.PacketBuffer) tcpip.Error {
	// A UDP writer is an application goroutine holding no stack lock, so
	// it may wait for room as a blocking socket waits for send buffer,
	// instead of being refused and retrying at once. Nothing else waits:
	// TCP segments, ACKs and control packets come from goroutines that
	// other connections share.
	mayWait := q.udpBlock > 0 && pkt.TransportProtocolNumber == header.UDPProtocolNumber
	var deadline time.Time
	for {
		err, room := q.admitOnce(pkt, mayWait)
		if room == nil {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(q.udpBlock)
		}
		if !q.waitRoom(room, deadline) {
			mayWait = false // one last try, refused if still full
		}
	}
}

// admitOnce runs one admission under the strategy's locks. If the queue is
// full and the packet may wait, it returns the channel that signals room.
func (q *Qdisc) admitOnce(pkt *stack.PacketBuffer, mayWait bool) (tcpip.Error, <-chan struct{}) {
	switch q.strat {
	case busyLock:
		// Only an enqueuer that finds a runner at work queues on the second
		// lock; the runner then meets at most one enqueuer at the root lock.
		contended := q.runningHint.Load()
		if contended {
			q.busy.lock(q.profile)
		}
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		if contended {
			q.busy.unlock()
		}
		if runner {
			q.run(first)
		}
		return err, room
	case enqLock:
		q.enq.lock(q.profile)
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		q.enq.unlock()
		if runner {
			q.run(first)
		}
		return err, room
	case lList:
		return q.admitLList(pkt, mayWait)
	default:
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		if runner {
			q.run(first)
		}
		return err, room
	}
}

// waitRoom waits for room, the deadline or Close, and reports whether room
// came.
func (q *Qdisc) waitRoom(room <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-room:
		return true
	case <-t.C:
		return false
	case <-q.stop:
		return false
	}
}

// roomLocked registers a waiter for room in the queue.
func (q *Qdisc) roomLocked() <-chan struct{} {
	if q.room == nil {
		q.room = make(chan struct{})
	}
	q.roomWaiters++
	q.blocked++
	return q.room
}

// signalRoomLocked wakes the writers waiting for room, if there is some.
func (q *Qdisc) signalRoomLocked() {
	if q.roomWaiters > 0 && (q.closed || q.fifo.len() < q.limit) {
		close(q.room)
		q.room, q.roomWaiters = nil, 0
	}
}

// admitLocked takes one packet under the root lock. It returns runner=true
// if the caller now owns the running token, and first, a reference to pkt,
// if pkt should be sent directly (bypass). If the queue is full and the
// packet may wait, it counts nothing and returns the channel to wait on.
func (q *Qdisc) admitLocked(pkt *stack.PacketBuffer, mayWait bool) (first *stack.PacketBuffer, runner bool, err tcpip.Error, room <-chan struct{}) {
	if mayWait && !q.closed && q.running && q.fifo.len() >= q.limit {
		return nil, false, nil, q.roomLocked()
	}
	q.offered++
	switch {
	case q.closed:
		q.refused.Closed++
		return nil, false, &tcpip.ErrClosedForSend{}, nil
	case !q.running:
		// Nobody runs, so the queue is empty: send directly (Linux's
		// TCQ_F_CAN_BYPASS), taking the token to keep order.
		q.setRunningLocked(true)
		q.enqueued++
		q.bypassed++
		return pkt.IncRef(), true, nil, nil
	case q.fifo.len() >= q.limit:
		q.refused.Overlimit++
		return nil, false, &tcpip.ErrNoBufferSpace{}, nil
	}
	q.fifo.pushBack(pkt.IncRef())
	q.enqueued++
	return nil, false, nil, nil
}
