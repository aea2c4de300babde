package linkutil

import "gvisor.dev/gvisor/pkg/tcpip/stack"

// PacketRing is the bounded FIFO of packet buffers that an in-process
// link queues between a writer and a reader (mem's wire, pktio's queues
// each way). It is not synchronised: its owner guards it with the lock
// that also guards what goes with it (closed flags, waiters, counters).
// Each packet it holds carries one reference, owned by the ring until it
// is taken out.
type PacketRing struct {
	pkts    []*stack.PacketBuffer
	head, n int
}

// NewPacketRing returns a ring with room for size packets.
func NewPacketRing(size int) PacketRing {
	return PacketRing{pkts: make([]*stack.PacketBuffer, size)}
}

// Len is how many packets the ring holds.
func (r *PacketRing) Len() int { return r.n }

// Full reports whether the ring has no room.
func (r *PacketRing) Full() bool { return r.n == len(r.pkts) }

// Room is how many more packets the ring takes.
func (r *PacketRing) Room() int { return len(r.pkts) - r.n }

// WakeRoom is how much room the ring must have before a writer it refused
// is told it can write again: a quarter of the ring, at least one packet.
// Waking on every freed slot would have the writer come back for one
// packet at a time; drivers likewise wake a stopped TX queue only once a
// threshold of descriptors is free.
func (r *PacketRing) WakeRoom() int { return max(len(r.pkts)/4, 1) }

func (r *PacketRing) next(i int) int {
	if i++; i == len(r.pkts) {
		return 0
	}
	return i
}

func (r *PacketRing) tail() int {
	t := r.head + r.n
	if t >= len(r.pkts) {
		t -= len(r.pkts)
	}
	return t
}

// Push queues pkt with the caller's reference, which passes to the ring.
// It reports false, and keeps nothing, when the ring is full.
func (r *PacketRing) Push(pkt *stack.PacketBuffer) bool {
	if r.Full() {
		return false
	}
	r.pkts[r.tail()] = pkt
	r.n++
	return true
}

// PushRefs queues as many of list, in order, as there is room for, taking
// a reference to each (the caller keeps its own), and returns how many it
// took and their bytes.
func (r *PacketRing) PushRefs(list []*stack.PacketBuffer) (n, bytes int) {
	tail := r.tail()
	for _, pkt := range list {
		if r.Full() {
			break
		}
		r.pkts[tail] = pkt.IncRef()
		tail = r.next(tail)
		bytes += pkt.Size()
		r.n++
		n++
	}
	return n, bytes
}

// Peek returns the oldest packet, still the ring's, or nil if it is empty.
func (r *PacketRing) Peek() *stack.PacketBuffer {
	if r.n == 0 {
		return nil
	}
	return r.pkts[r.head]
}

// Pop takes the oldest packet out; its reference passes to the caller.
// It returns nil if the ring is empty.
func (r *PacketRing) Pop() *stack.PacketBuffer {
	if r.n == 0 {
		return nil
	}
	p := r.pkts[r.head]
	r.pkts[r.head] = nil
	r.head = r.next(r.head)
	r.n--
	return p
}

// PopInto takes up to len(batch) packets out, oldest first, into batch,
// and returns how many; their references pass to the caller.
func (r *PacketRing) PopInto(batch []*stack.PacketBuffer) int {
	k := 0
	for ; k < len(batch) && r.n > 0; k++ {
		batch[k] = r.Pop()
	}
	return k
}

// Drain takes every packet out, appending them to dst, so that the caller
// can release them after dropping its lock.
func (r *PacketRing) Drain(dst []*stack.PacketBuffer) []*stack.PacketBuffer {
	for r.n > 0 {
		dst = append(dst, r.Pop())
	}
	return dst
}
