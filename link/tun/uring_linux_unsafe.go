//go:build linux

package tun

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// txRingEntries is the size of a queue's io_uring submission queue: how
// many packets one io_uring_enter writes at most. 64 is gVisor's and the
// qdiscs' largest batch (and NAPI's weight); a longer batch takes two.
const txRingEntries = 64

// rxRingEntries is the size of a queue's receive ring: how many packets
// one io_uring_enter reads at most. 64 is DefaultRXBatch (NAPI's weight);
// a longer batch takes more trips.
const rxRingEntries = 64

// rxSlabMax bounds the landing slab of a queue with a receive ring, which
// holds a slot for each read of a trip: 256 KiB is room for 64 packets of
// an MTU up to 4 KiB, and for fewer, larger ones (29 slots of a 9000-byte
// MTU); the slab is never smaller than the landing buffer without the
// ring (rxBufSize), whose slots it then also holds.
const rxSlabMax = 256 << 10

// txRingIovecs is how many iovecs one ring trip gathers from, for all its
// packets together: a packet without the virtio-net header is a header
// view and a payload view or two, so four per packet leave room. A trip
// that runs out submits what it has; the rest go in the next one.
const txRingIovecs = 4 * txRingEntries

// The io_uring ABI (include/uapi/linux/io_uring.h) as far as txRing and
// rxRing use it.
const (
	ioringOpWritev              = 2          // IORING_OP_WRITEV
	ioringOpRead                = 22         // IORING_OP_READ (Linux 5.6)
	ioringEnterGetEvents        = 1          // IORING_ENTER_GETEVENTS
	ioringFeatSingleMmap        = 1          // IORING_FEAT_SINGLE_MMAP
	ioringOffSQEs               = 0x10000000 // IORING_OFF_SQES
	iosqeIOLink                 = 1 << 2     // IOSQE_IO_LINK: the next starts when this one ended well
	rwfNoWait                   = 0x8        // RWF_NOWAIT: EAGAIN at once, never parked until writable
	ioringSQESize               = 64
	ioringCQESize               = 16
	ioringCurrentPos     uint64 = ^uint64(0) // offset -1: the file's position (none on a TUN)
)

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringSQE is struct io_uring_sqe, for the fields a write uses.
type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, rwFlags  uint32
	userData      uint64
	_             [24]byte
}

// uringCQE is struct io_uring_cqe.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uring is an io_uring instance as the queues use it: submission and
// completion rings mapped once, entries filled by the one goroutine that
// holds it (txRing's mu, or the receive round's gate.Owner), a trip
// submitted with one io_uring_enter and reaped before the holder lets go.
type uring struct {
	fd      int // -1 once closed
	ring    []byte
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []uringSQE
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []uringCQE
}

// setup sets r up with room for entries requests per trip, and reports
// false where the kernel has none (ENOSYS, or io_uring turned off by
// kernel.io_uring_disabled: EPERM, or a kernel before 5.4); r is then
// closed.
func (r *uring) setup(entries uint32) bool {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		r.fd = -1
		return false
	}
	r.fd = int(fd)
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if p.features&ioringFeatSingleMmap == 0 || p.sqEntries < entries {
		return false // before Linux 5.4
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*ioringCQESize)
	m, err := unix.Mmap(r.fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return false
	}
	r.ring = m
	s, err := unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*ioringSQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return false
	}
	r.sqeMem = s
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
	r.sqHead, r.sqTail, r.sqMask = u32(p.sqOff.head), u32(p.sqOff.tail), *u32(p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&s[0])), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = u32(p.cqOff.head), u32(p.cqOff.tail), *u32(p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&m[p.cqOff.cqes])), p.cqEntries)
	ok = true
	return true
}

// close unmaps the ring and closes it; the caller holds it.
func (r *uring) close() {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
		r.sqeMem = nil
	}
	if r.ring != nil {
		unix.Munmap(r.ring)
		r.ring = nil
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
	r.sqes, r.cqes, r.sqArray = nil, nil, nil
}

// sqe returns the entry of the trip's i-th request, to be filled, and
// points the submission queue's slot at it.
func (r *uring) sqe(i int) *uringSQE {
	tail := *r.sqTail // ours alone: the kernel reads the SQ only inside io_uring_enter
	idx := (tail + uint32(i)) & r.sqMask
	r.sqArray[idx] = idx
	return &r.sqes[idx]
}

// trip submits the first taken requests filled through sqe (each with
// userData its index) in one io_uring_enter, and reaps the completion of
// every one the kernel took into results[userData], waiting for those not
// yet done (a request the kernel handed to a worker). It returns how many
// the kernel took, from the first on, and the errno of io_uring_enter if
// it took fewer: their entries are withdrawn, never to be read.
func (r *uring) trip(taken int, results []int32) (int, unix.Errno) {
	tail := *r.sqTail
	atomic.StoreUint32(r.sqTail, tail+uint32(taken))
	submitted, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(taken), uintptr(taken), ioringEnterGetEvents, 0, 0)
	if e != 0 {
		submitted = 0
	}
	if int(submitted) < taken {
		// Take back what the kernel did not consume, so that it never
		// reads those entries.
		head := atomic.LoadUint32(r.sqHead)
		atomic.StoreUint32(r.sqTail, head)
		submitted = uintptr(head - tail)
	} else {
		e = 0
	}
	got := 0
	for got < int(submitted) {
		head, ctail := *r.cqHead, atomic.LoadUint32(r.cqTail)
		for ; head != ctail; head++ {
			c := &r.cqes[head&r.cqMask]
			if int(c.userData) < len(results) {
				results[c.userData] = c.res
			}
			got++
		}
		atomic.StoreUint32(r.cqHead, head)
		if got < int(submitted) {
			unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, uintptr(int(submitted)-got), ioringEnterGetEvents, 0, 0)
		}
	}
	return int(submitted), e
}

// refused reports whether io_uring_enter's errno means it will never
// work here: a seccomp filter refuses it (EPERM, or ENOSYS).
func refused(e unix.Errno) bool { return e == unix.EPERM || e == unix.ENOSYS }

// txRing is a queue's io_uring for writes: a batch of packets goes to the
// kernel as linked writev requests (each starts only once the one before
// it succeeded, so the packets keep their order and the first failure
// cancels the rest) in one io_uring_enter, instead of one writev(2) each.
// Without the virtio-net header every packet is one write, and the system
// call is a large share of what a write costs. One writer at a time holds
// mu; a writer that finds it held writes with writev instead.
type txRing struct {
	mu      sync.Mutex
	off     bool // the kernel refused io_uring_enter (a seccomp filter): writev from now on
	u       uring
	iov     [txRingIovecs]unix.Iovec
	results [txRingEntries]int32 // the completions of one trip, in packet order
}

// newTXRing sets up a ring, or returns nil where the kernel has none:
// the queue then writes with writev.
func newTXRing() *txRing {
	r := &txRing{}
	if !r.u.setup(txRingEntries) {
		return nil
	}
	return r
}

// close unmaps the ring and closes it; a writer holding mu finishes first.
func (r *txRing) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.u.close()
}

// write writes pkts (without a virtio-net header) to fd, the queue's
// descriptor, held by the caller's RawConn, with one io_uring_enter, in
// order. It returns how many it wrote and the errno of the first
// that failed (0 if none did), or ok false if the ring cannot be used (it
// is busy, closed or refused), having written nothing: the caller then
// writes them with writev. A trip takes at most txRingEntries packets and
// txRingIovecs pieces; it returns after those it took.
func (r *txRing) write(fd int, pkts []*stack.PacketBuffer) (n int, errno unix.Errno, ok bool) {
	if !r.mu.TryLock() {
		return 0, 0, false
	}
	defer r.mu.Unlock()
	if r.u.fd < 0 || r.off {
		return 0, 0, false
	}
	iov := 0
	taken := 0
	for i, pkt := range pkts[:min(len(pkts), txRingEntries)] {
		first := iov
		end, fits := appendViews(r.iov[:], iov, pkt)
		if !fits || end == first {
			break
		}
		iov = end
		*r.u.sqe(i) = uringSQE{
			opcode:   ioringOpWritev,
			flags:    iosqeIOLink,
			fd:       int32(fd),
			off:      ioringCurrentPos,
			addr:     uint64(uintptr(unsafe.Pointer(&r.iov[first]))),
			len:      uint32(iov - first),
			rwFlags:  rwfNoWait,
			userData: uint64(i),
		}
		taken++
	}
	if taken == 0 {
		return 0, 0, false
	}
	r.u.sqe(taken - 1).flags = 0 // the chain ends here
	submitted, e := r.u.trip(taken, r.results[:])
	if refused(e) {
		r.off = true
	}
	clear(r.iov[:iov]) // hold no packet's memory past the call
	results := r.results[:submitted]
	for i, res := range results {
		if res < 0 {
			if i == 0 && (res == -int32(unix.EOPNOTSUPP) || res == -int32(unix.EINVAL)) {
				// The file takes no RWF_NOWAIT, or no io_uring write:
				// nothing was written, and the ring is of no use.
				r.off = true
				return 0, 0, false
			}
			return i, unix.Errno(-res), true
		}
	}
	if submitted == 0 {
		return 0, 0, false
	}
	return submitted, 0, true
}

// rxRing is a queue's io_uring for reads: a trip is several read requests
// into consecutive slots of the queue's landing slab, issued in order in
// one io_uring_enter, instead of one read(2) each. The requests are not
// linked (a read that returns less than its buffer, which a packet always
// does, would cut a chain), and carry RWF_NOWAIT: each returns a packet or
// EAGAIN at once, and the kernel runs them in order, so the packets land
// in the slots in the order the device handed them over. Without the
// virtio-net header every packet is one read, and the system call is a
// large share of what a read costs. It belongs to the holder of the
// queue's gate.Owner.
type rxRing struct {
	u       uring
	off     bool                 // the kernel refused it: read(2) from now on
	results [rxRingEntries]int32 // the completions of one trip, in slot order
}

// newRXRing sets up a ring, or returns nil where the kernel has none: the
// queue then reads with read(2).
func newRXRing() *rxRing {
	r := &rxRing{}
	if !r.u.setup(rxRingEntries) {
		return nil
	}
	return r
}

// close unmaps the ring and closes it; the caller holds the queue's
// gate.Owner.
func (r *rxRing) close() {
	if r != nil {
		r.u.close()
	}
}

// read reads up to k packets from fd, the queue's descriptor, held by the
// caller's RawConn, into k slots of slot bytes from the start of slab, in
// one io_uring_enter. It returns each read's result in slot order: the
// packet's length, 0 at end of file, or -errno (-EAGAIN where the queue was
// empty); or ok false, having read nothing, if the ring cannot be used
// (closed, or refused): the caller then reads with read(2). k is at most
// rxRingEntries and slab holds k slots.
func (r *rxRing) read(fd int, slab []byte, slot, k int) (results []int32, ok bool) {
	if r.u.fd < 0 || r.off {
		return nil, false
	}
	for i := range k {
		*r.u.sqe(i) = uringSQE{
			opcode:   ioringOpRead,
			fd:       int32(fd),
			off:      ioringCurrentPos,
			addr:     uint64(uintptr(unsafe.Pointer(&slab[i*slot]))),
			len:      uint32(slot),
			rwFlags:  rwfNoWait,
			userData: uint64(i),
		}
	}
	submitted, e := r.u.trip(k, r.results[:])
	if refused(e) {
		r.off = true
	}
	if submitted == 0 {
		return nil, false
	}
	results = r.results[:submitted]
	if res := results[0]; res == -int32(unix.EOPNOTSUPP) || res == -int32(unix.EINVAL) {
		// The file takes no RWF_NOWAIT, or the kernel no io_uring read
		// (before 5.6): nothing was read, and the ring is of no use.
		r.off = true
		return nil, false
	}
	return results, true
}
