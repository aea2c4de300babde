package sched

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// admit runs one admission under the strategy's locks. It never waits for
// room: a full queue refuses at once (ErrNoBufferSpace, counted), because
// WritePacket is called from goroutines that must not park here, a
// routing stack's receive loop among them. A writer that may wait (a
// stack's UDP socket, as Linux's waits for send buffer) does so above the
// qdisc, on Room.
func (q *Qdisc) admit(pkt *stack.PacketBuffer) tcpip.Error {
	switch q.strat {
	case busyLock:
		// Only an enqueuer that finds a runner at work queues on the second
		// lock; the runner then meets at most one enqueuer at the root lock.
		contended := q.runningHint.Load()
		if contended {
			q.busy.lock(q.profile)
		}
		q.root.lock(q.profile)
		first, runner, err := q.admitLocked(pkt)
		q.root.unlock()
		if contended {
			q.busy.unlock()
		}
		if runner {
			q.run(first)
		}
		return err
	case enqLock:
		q.enq.lock(q.profile)
		q.root.lock(q.profile)
		first, runner, err := q.admitLocked(pkt)
		q.root.unlock()
		q.enq.unlock()
		if runner {
			q.run(first)
		}
		return err
	case lList:
		return q.admitLList(pkt)
	default:
		q.root.lock(q.profile)
		first, runner, err := q.admitLocked(pkt)
		q.root.unlock()
		if runner {
			q.run(first)
		}
		return err
	}
}

// admitLocked takes one packet under the root lock. It returns runner=true
// if the caller now owns the running token, and first, a reference to pkt,
// if pkt should be sent directly (bypass); runner with a nil first is a
// take-over of a receive round's token whose queue holds a batch.
func (q *Qdisc) admitLocked(pkt *stack.PacketBuffer) (first *stack.PacketBuffer, runner bool, err tcpip.Error) {
	q.offered++
	switch {
	case q.closed:
		q.refused.Closed++
		return nil, false, &tcpip.ErrClosedForSend{}
	case !q.running && q.handOff:
		q.handOffLocked(pkt.IncRef())
		return nil, false, nil
	case !q.running:
		// Nobody runs, so the queue is empty: send directly (Linux's
		// TCQ_F_CAN_BYPASS), taking the token to keep order.
		q.setRunningLocked(true)
		q.enqueued++
		q.bypassed++
		return pkt.IncRef(), true, nil
	case q.fifo.len() >= q.limit:
		q.refused.Overlimit++
		return nil, false, &tcpip.ErrNoBufferSpace{}
	}
	q.fifo.pushBack(pkt.IncRef())
	q.backlogHint.Store(int32(q.fifo.len()))
	q.enqueued++
	return nil, q.roundFullLocked(), nil
}

// handOffLocked queues pkt, which found the queue empty and nobody running
// it, for the background goroutine (Options.HandOff): the token is parked
// for it, as after a spent quota, so writers meanwhile queue behind pkt
// and the goroutine sends them all.
func (q *Qdisc) handOffLocked(pkt *stack.PacketBuffer) {
	q.setRunningLocked(true)
	q.parked = true
	q.fifo.pushBack(pkt)
	q.backlogHint.Store(int32(q.fifo.len()))
	q.enqueued++
	q.handedOff++
	q.kickTX()
}

// closedRoom is the channel Room returns when there is room already.
var closedRoom = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Room implements RoomNotifier. The channel it returns is closed once the
// queue has room, or the discipline is closed; if the queue has room now,
// it is closed already, so a writer refused a moment ago never misses the
// room made in between. Each wait it registers is counted in
// Stats.Blocked.
//
// Room answers for writers that can wait, and keeps a margin for those
// that cannot: it reports no room while the queue is within headroom of
// its limit, so that the writers already past their look (at most one
// packet each in flight) still find room, instead of refusals the qdisc
// counts. Once it has said no, it says yes again only when the queue is
// half empty (signalRoomLocked).
func (q *Qdisc) Room() <-chan struct{} {
	// Without the lock first: a writer may ask before every write (a
	// connected UDP socket that was refused before), so the common answer,
	// room, must cost no more than a couple of atomic loads.
	if !q.crowded(int(q.backlogHint.Load())) {
		return closedRoom
	}
	q.root.lock(q.profile)
	defer q.root.unlock()
	if q.closed || !q.crowded(q.fifo.len()) {
		return closedRoom
	}
	if q.room == nil {
		q.room = make(chan struct{})
	}
	q.roomWaiters++
	q.blocked++
	return q.room
}

// headroom is the margin Room keeps below the limit: a batch (the most one
// run dequeues at once) of the 64 or so writers a qdisc serves at most in
// our benchmarks, and never more than half the queue, where writers are
// woken again.
func (q *Qdisc) headroom() int { return min(q.batchMax, q.limit/2) }

// crowded reports whether a queue of backlog packets is within headroom of
// refusing the next one. llist also counts what waits on its deferred list,
// and is crowded at its burst cap, where admitLList refuses.
func (q *Qdisc) crowded(backlog int) bool {
	depth := 0
	if q.strat == lList {
		if head := q.deferred.Load(); head != nil {
			depth = int(head.depth.Load())
		}
		if depth >= q.maxBurst {
			return true
		}
	}
	return backlog+depth >= q.limit-q.headroom()
}

// signalRoomLocked wakes the writers waiting for room once the queue is at
// most half full, as Linux wakes a socket's writers only when half its
// send buffer is free (sock_writeable): woken all at once, they then find
// room for all of them, rather than refusals that the qdisc counts and
// they wait out again.
func (q *Qdisc) signalRoomLocked() {
	if q.roomWaiters > 0 && (q.closed || q.fifo.len() <= q.limit/2) {
		close(q.room)
		q.room, q.roomWaiters = nil, 0
	}
}
