package sched

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// node is one packet on llist's lock-free list.
type node struct {
	pkt  *stack.PacketBuffer // the list's reference
	next *node               // the packet pushed before this one
	// depth counts the packets on the list up to and including this one.
	// It is atomic because a pusher may read it from a node that a leader
	// has meanwhile detached and recycled (ABA): its compare-and-swap then
	// fails, or succeeds onto a consistent list, but the read must not race.
	depth atomic.Int32
}

// nodePool recycles list nodes, so that a push does not allocate. Reuse is
// safe for this list: nodes are only pushed one at a time and detached all
// at once, so a recycled head can only make a stale pusher's CAS fail or
// link it in front of a valid list.
var nodePool = sync.Pool{New: func() any { return new(node) }}

// admitLList pushes pkt onto the deferred list with one compare-and-swap.
// Whoever finds the list empty becomes its leader: it takes the root lock
// for everybody; the others return at once.
func (q *Qdisc) admitLList(pkt *stack.PacketBuffer, mayWait bool) (tcpip.Error, <-chan struct{}) {
	n := nodePool.Get().(*node)
	// The reference must exist before the push publishes the node: a
	// leader may take it and send it before this call returns.
	n.pkt = pkt.IncRef()
	for {
		old := q.deferred.Load()
		depth := int32(1)
		if old != nil {
			depth = old.depth.Load() + 1
		}
		n.next = old
		n.depth.Store(depth)
		// Linux's qdisc_max_burst: a list this long means the leader cannot
		// keep up; refuse rather than defer without bound. And what the
		// queue has no room for would only be dropped by the leader after
		// this caller was told it was accepted: refuse it now, so the
		// caller knows, as the lock-based strategies' callers do.
		burst := int(depth) > q.maxBurst
		if burst || int(depth)+int(q.backlogHint.Load()) > q.limit {
			n.pkt, n.next = nil, nil
			nodePool.Put(n)
			pkt.DecRef()
			if mayWait {
				// Wait for the runner to make room, as a lock-based
				// strategy's writer does; a list at its cap drains
				// into the queue as the runner empties it, too.
				q.root.lock(q.profile)
				var room <-chan struct{}
				if !q.closed && q.running && (burst || q.fifo.len()+int(depth) > q.limit) {
					room = q.roomLocked()
				}
				q.root.unlock()
				if room != nil {
					return nil, room
				}
				return q.admitLList(pkt, false)
			}
			if burst {
				q.burstRefused.Add(1)
			} else {
				q.overRefused.Add(1)
			}
			return &tcpip.ErrNoBufferSpace{}, nil
		}
		if q.deferred.CompareAndSwap(old, n) {
			if old != nil {
				return nil, nil
			}
			return q.leadLList(), nil
		}
		q.casRetries.Add(1)
	}
}

// leadLList takes the root lock, detaches the whole list under it (so that
// successive leaders' batches stay in order), restores arrival order,
// enqueues every packet and runs the queue if nobody does. The leader's
// own packet is the oldest on the list; it gets a real error only if it was
// alone in the batch, since the others' callers have already returned.
func (q *Qdisc) leadLList() tcpip.Error {
	q.root.lock(q.profile)
	head := q.deferred.Swap(nil)
	nodes := q.llScratch[:0]
	for n := head; n != nil; n = n.next {
		nodes = append(nodes, n)
	}
	alone := len(nodes) == 1
	var (
		err     tcpip.Error
		first   *stack.PacketBuffer
		runner  bool
		release []*stack.PacketBuffer
	)
	// The list is newest first: walk it backwards for arrival order.
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		pkt := n.pkt
		n.pkt, n.next = nil, nil
		nodePool.Put(n)
		nodes[i] = nil
		q.offered++
		switch {
		case q.closed:
			if alone {
				q.refused.Closed++
				err = &tcpip.ErrClosedForSend{}
			} else {
				q.enqueued++
				q.dropped.Closed++
			}
			release = append(release, pkt)
		case !q.running:
			// Empty and idle: the oldest packet goes out directly.
			q.setRunningLocked(true)
			runner = true
			first = pkt
			q.enqueued++
			q.bypassed++
		case q.fifo.len() >= q.limit:
			if alone {
				q.refused.Overlimit++
				err = &tcpip.ErrNoBufferSpace{}
			} else {
				q.enqueued++
				q.dropped.Overlimit++
			}
			release = append(release, pkt)
		default:
			q.fifo.pushBack(pkt)
			q.enqueued++
		}
	}
	q.llScratch = nodes[:0]
	q.backlogHint.Store(int32(q.fifo.len()))
	q.root.unlock()
	for _, p := range release {
		p.DecRef()
	}
	if runner {
		q.run(first)
	}
	return err
}
