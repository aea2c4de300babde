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

// nodePool recycles list nodes, so that a push does not allocate.
//
// Why recycling cannot corrupt the list (the ABA problem): a pusher loads
// the head A, links its node n in front of it (n.next = A) and swaps n in
// with one CAS that expects A. Between the load and the CAS a leader may
// detach the whole list and recycle A, and another pusher may take A from
// the pool and push it again, so that the head is A once more, now with
// other contents. The CAS then succeeds. In a lock-free stack that pops
// one node at a time this is the classic corruption: the popper's stale
// A.next is installed as the head. This list never pops a single node:
// pushes are its only CAS, and a push reads nothing of A but its address
// (which it keeps as n.next) and its depth. So when the head is A again,
// n.next = A is exactly the current list, and n lands in front of it: the
// list stays whole, each packet on it once, in the order of the CASes that
// put them there (a push's order point is its CAS, not its load). Only n's
// depth may be stale (A's old depth plus one), and depth only feeds the
// burst cap, a bound that may then be off by the difference for one list;
// it never decides what is sent. TestLListABA forces this interleaving.
var nodePool = sync.Pool{New: func() any { return new(node) }}

// llistHooks let a test force an interleaving: a pointer on the Qdisc,
// nil in production, so each hook point costs one predictable branch.
type llistHooks struct {
	// beforeCAS runs in a pusher between its load of the head (old) and
	// its compare-and-swap.
	beforeCAS func(old *node)
	// get and put replace nodePool, so that a test recycles a node of
	// its choosing when it chooses.
	get func() *node
	put func(*node)
}

func (q *Qdisc) getNode() *node {
	if h := q.llHooks; h != nil {
		return h.get()
	}
	return nodePool.Get().(*node)
}

func (q *Qdisc) putNode(n *node) {
	n.pkt, n.next = nil, nil
	if h := q.llHooks; h != nil {
		h.put(n)
		return
	}
	nodePool.Put(n)
}

// admitLList pushes pkt onto the deferred list with one compare-and-swap.
// Whoever finds the list empty becomes its leader: it takes the root lock
// for everybody; the others return at once.
func (q *Qdisc) admitLList(pkt *stack.PacketBuffer) tcpip.Error {
	n := q.getNode()
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
			q.putNode(n)
			pkt.DecRef()
			if burst {
				q.burstRefused.Add(1)
			} else {
				q.overRefused.Add(1)
			}
			return &tcpip.ErrNoBufferSpace{}
		}
		if q.llHooks != nil {
			q.llHooks.beforeCAS(old)
		}
		if q.deferred.CompareAndSwap(old, n) {
			if old != nil {
				return nil
			}
			return q.leadLList()
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
		q.putNode(n)
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
		case !q.running && q.handOff:
			q.handOffLocked(pkt)
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
	if !runner && q.roundFullLocked() {
		runner = true
	}
	q.root.unlock()
	for _, p := range release {
		p.DecRef()
	}
	if runner {
		q.run(first)
	}
	return err
}
