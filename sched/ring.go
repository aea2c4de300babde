package sched

import "gvisor.dev/gvisor/pkg/tcpip/stack"

// pktRing is the discipline's bounded FIFO. Its capacity is the queue
// limit plus one batch, so that a batch the link refused always fits back
// at the head even when enqueuers filled the queue meanwhile. Not safe for
// concurrent use: the root lock guards it.
type pktRing struct {
	buf  []*stack.PacketBuffer
	head int
	n    int
}

func newPktRing(capacity int) pktRing {
	return pktRing{buf: make([]*stack.PacketBuffer, capacity)}
}

func (r *pktRing) len() int { return r.n }

func (r *pktRing) idx(i int) int {
	i += r.head
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return i
}

// pushBack appends pkt; the ring takes over the caller's reference.
func (r *pktRing) pushBack(pkt *stack.PacketBuffer) {
	r.buf[r.idx(r.n)] = pkt
	r.n++
}

// pushFront puts pkts back at the head, keeping their order.
func (r *pktRing) pushFront(pkts []*stack.PacketBuffer) {
	for i := len(pkts) - 1; i >= 0; i-- {
		r.head--
		if r.head < 0 {
			r.head = len(r.buf) - 1
		}
		r.buf[r.head] = pkts[i]
		r.n++
	}
}

// popFront removes the head; the caller takes over its reference.
func (r *pktRing) popFront() *stack.PacketBuffer {
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = r.idx(1)
	r.n--
	return p
}
