//go:build linux

package afpacket

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// ringBlockSize is one block of a TPACKET_V3 receive ring: the kernel
	// fills a block with frames and hands it over whole. 128 KiB is the
	// smallest power of two that holds a 64 KiB super-packet behind its
	// headers (a frame never spans blocks; a larger one would be cut).
	ringBlockSize = 128 << 10
	// ringFrameSize is the frame size the kernel's ring request wants;
	// TPACKET_V3 packs frames of any size into a block, so it only has to
	// divide the block (2 KiB, as the kernel's documentation uses).
	ringFrameSize = 2 << 10
	// ringMinBlocks is the fewest blocks a ring has, so that the kernel
	// fills some while the reader empties others.
	ringMinBlocks = 4
	// ringBlockTimeout is how long, in milliseconds, the kernel keeps
	// filling a block before it hands it over partly full: the 1 ms
	// minimum, since nothing reaches the reader before (TPACKET_V3 wakes a
	// reader only when a block is closed), so this is added latency on a
	// quiet link.
	ringBlockTimeout = 1
)

// rxRing is a queue's receive ring, of either kind (one is set), as New
// opens it; the zero value stands for none (recvmmsg).
type rxRing struct {
	blocks *ring
	slots  *slotRing
}

// unmap releases the mapping of whichever ring is set.
func (r rxRing) unmap() {
	if r.blocks != nil {
		r.blocks.unmap()
	}
	if r.slots != nil {
		r.slots.unmap()
	}
}

// ring is a queue's TPACKET_V3 receive ring, mapped from the socket: the
// kernel fills its blocks with frames and hands them to the reader whole
// (block status TP_STATUS_USER), who copies the frames out and hands the
// block back (TP_STATUS_KERNEL). Blocks are handed over, and so read, in
// ring order. It belongs to whoever holds the queue's gate.Owner.
type ring struct {
	mem    []byte // the mapping; nil once unmapped
	blocks int
	next   int // the block to read next
}

// blocksFor returns how many blocks a ring gets for a receive buffer of
// rcvBuf bytes: the same memory, at least ringMinBlocks.
func blocksFor(rcvBuf int) int { return max(rcvBuf/ringBlockSize, ringMinBlocks) }

// setupRing switches the socket fd to TPACKET_V3 and maps a receive ring
// of blocks blocks from it. It must run before bind: the frames a bound
// socket queued before the ring existed would never be read.
func setupRing(fd, blocks int, ifname string) (*ring, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, sockErr(ifname, "select TPACKET_V3 for the receive ring (or set Options.RX to RXRecvmmsg)", "setsockopt", err)
	}
	req := unix.TpacketReq3{
		Block_size:     ringBlockSize,
		Block_nr:       uint32(blocks),
		Frame_size:     ringFrameSize,
		Frame_nr:       uint32(blocks * ringBlockSize / ringFrameSize),
		Retire_blk_tov: ringBlockTimeout,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, sockErr(ifname, fmt.Sprintf("set up a receive ring of %d blocks of %d bytes (or set Options.RX to RXRecvmmsg)", blocks, ringBlockSize), "setsockopt PACKET_RX_RING", err)
	}
	mem, err := unix.Mmap(fd, 0, blocks*ringBlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, sockErr(ifname, fmt.Sprintf("map the %d-byte receive ring", blocks*ringBlockSize), "mmap", err)
	}
	return &ring{mem: mem, blocks: blocks}, nil
}

// ready returns the next block if the kernel has handed it over.
func (r *ring) ready() ([]byte, bool) {
	blk := r.mem[r.next*ringBlockSize : (r.next+1)*ringBlockSize]
	return blk, blockStatus(blk).Load()&tpStatusUser != 0
}

// release hands the block ready returned back to the kernel, once every
// frame in it was copied out, and moves on to the next.
func (r *ring) release(blk []byte) {
	blockStatus(blk).Store(unix.TP_STATUS_KERNEL)
	r.next = (r.next + 1) % r.blocks
}

// unmap releases the mapping; the kernel frees the ring with the socket.
func (r *ring) unmap() error { return unmapRing(&r.mem) }

// unmapRing unmaps a ring's mapping *mem, if not done yet, and forgets it,
// so that a round after Close finds the ring gone (mem nil).
func unmapRing(mem *[]byte) error {
	if *mem == nil {
		return nil
	}
	err := unix.Munmap(*mem)
	*mem = nil
	if err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

// ringRound is a receive round on the ring: the next block, if the kernel
// handed it over, delivered (beginRound, the block's frames, endRound) and
// handed back. With none, it returns EAGAIN, or the error the kernel left
// on the socket (ENETDOWN when the interface went down or away: a ring
// has no receive call to report it, so the socket's pending error is
// read). The caller holds q.gate.Owner.
func (q *queue) ringRound(fd int) (int, unix.Errno) {
	if q.ring.mem == nil {
		return 0, unix.EBADF // unmapped by Close
	}
	blk, ok := q.ring.ready()
	if !ok {
		return 0, q.pendingError(fd)
	}
	return q.ringBlock(blk), 0
}

// ringBlock delivers the frames of the block blk as one round (beginRound,
// the frames, endRound), hands it back to the kernel and returns how many
// frames it delivered.
func (q *queue) ringBlock(blk []byte) int {
	q.beginRound()
	n, bad := walkBlock(blk, q.e.vnetHdr, q.ringFrame)
	q.endRound()
	q.ring.release(blk)
	if bad > 0 {
		q.rxErrors.Add(uint64(bad))
	}
	return n
}

// busyPollRing is busyPoll's round on the ring, with q.gate.Owner held:
// a block if the kernel handed one over, and no system call either way
// (failures are the receive goroutine's to find).
func (q *queue) busyPollRing() int {
	if q.ring.mem == nil {
		return 0 // unmapped by Close
	}
	blk, ok := q.ring.ready()
	if !ok {
		return 0
	}
	n := q.ringBlock(blk)
	q.gate.CountPolled()
	return n
}

const (
	// slotBlockSize is the block of a TPACKET_V2 ring's memory: the
	// kernel allocates the ring a block at a time and lays slots out in
	// each, so a block is a whole number of slots (and of pages). 64 KiB
	// keeps the allocations small; a larger slot gets a block of its own.
	slotBlockSize = 64 << 10
	// slotMinSize is the smallest slot: 2 KiB holds a 1500-byte-MTU frame
	// behind the slot's headers, as the kernel lays them out (see
	// slotSizeFor), and is a power of two, so slots tile a block.
	slotMinSize = 2 << 10
	// slotHeadroom is the most the kernel puts before a frame's Ethernet
	// header in a slot: tp_mac is TPACKET_ALIGN(TPACKET2_HDRLEN + 16) plus
	// the virtio-net header, less the link header (at least 14 bytes).
	slotHeadroom = 80 + 10 - 14
	// slotMinCount is the fewest slots a ring has, whatever RcvBuf says,
	// so that a short burst fits even in jumbo-sized slots; otherwise the
	// ring takes RcvBuf bytes (2048 slots of 2 KiB by default, 32 slots
	// of 128 KiB at the largest MTU).
	slotMinCount = 16
)

// slotRing is a queue's TPACKET_V2 receive ring, mapped from the socket:
// the kernel writes each frame into the next slot and hands it over at
// once (slot status TP_STATUS_USER) with a wake-up of the socket's
// waiters; the reader copies the frame out and hands the slot back
// (TP_STATUS_KERNEL). A frame larger than a slot (a super-packet) is
// queued on the socket whole (PACKET_COPY_THRESH) and its slot says so
// (TP_STATUS_COPY), in order. It belongs to whoever holds the queue's
// gate.Owner.
type slotRing struct {
	mem   []byte // the mapping; nil once unmapped
	size  int    // bytes per slot
	slots int
	next  int // the slot to read next
}

// slotSizeFor returns the slot size for an interface MTU: the smallest
// power of two, at least slotMinSize, that holds a frame of the MTU (with
// a VLAN tag) behind the slot's headers. Larger frames still arrive, by
// copy.
func slotSizeFor(mtu int) int {
	need := slotHeadroom + linkHdrLen + 4 + mtu
	s := slotMinSize
	for s < need && s < slotBlockSize<<4 {
		s <<= 1
	}
	return s
}

// slotGeometry returns the block size and count of a slot ring with slots
// of size bytes for a receive buffer of rcvBuf bytes: the same memory, at
// least slotMinCount slots.
func slotGeometry(size, rcvBuf int) (blockSize, blocks int) {
	blockSize = max(size, slotBlockSize)
	slots := max(rcvBuf/size, slotMinCount)
	perBlock := blockSize / size
	return blockSize, (slots + perBlock - 1) / perBlock
}

// setupSlotRing switches the socket fd to TPACKET_V2, has frames larger
// than a slot queued on the socket (PACKET_COPY_THRESH) and maps a receive
// ring of slots sized for mtu, holding about rcvBuf bytes. It must run
// before bind, as setupRing.
func setupSlotRing(fd, mtu, rcvBuf int, ifname string) (*slotRing, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return nil, sockErr(ifname, "select TPACKET_V2 for the receive ring (or set Options.RX to RXRecvmmsg)", "setsockopt", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return nil, sockErr(ifname, "set PACKET_COPY_THRESH (or set Options.RX to RXRecvmmsg)", "setsockopt", err)
	}
	size := slotSizeFor(mtu)
	blockSize, blocks := slotGeometry(size, rcvBuf)
	req := unix.TpacketReq{
		Block_size: uint32(blockSize),
		Block_nr:   uint32(blocks),
		Frame_size: uint32(size),
		Frame_nr:   uint32(blocks * (blockSize / size)),
	}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, sockErr(ifname, fmt.Sprintf("set up a receive ring of %d slots of %d bytes (or set Options.RX to RXRecvmmsg)", req.Frame_nr, size), "setsockopt PACKET_RX_RING", err)
	}
	mem, err := unix.Mmap(fd, 0, blocks*blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, sockErr(ifname, fmt.Sprintf("map the %d-byte receive ring", blocks*blockSize), "mmap", err)
	}
	return &slotRing{mem: mem, size: size, slots: int(req.Frame_nr)}, nil
}

// ready returns the next slot and its status if the kernel has handed it
// over. Slots tile the blocks, so slot i is at i*size.
func (r *slotRing) ready() ([]byte, uint32, bool) { return r.peek(0) }

// peek returns the slot i places after the next, and its status, if the
// kernel has handed it over.
func (r *slotRing) peek(i int) ([]byte, uint32, bool) {
	j := (r.next + i) % r.slots
	s := r.mem[j*r.size : (j+1)*r.size]
	st := slotStatus(s).Load()
	return s, st, st&tpStatusUser != 0
}

// release hands the slot ready returned back to the kernel, once its frame
// was copied out, and moves on to the next.
func (r *slotRing) release(s []byte) {
	slotStatus(s).Store(unix.TP_STATUS_KERNEL)
	r.next++
	if r.next == r.slots {
		r.next = 0
	}
}

// unmap releases the mapping; the kernel frees the ring with the socket.
func (r *slotRing) unmap() error { return unmapRing(&r.mem) }

// slotRound is a receive round on the slot ring: up to RXBatch slots the
// kernel handed over, delivered as one round (beginRound, the frames,
// endRound) and handed back, with no system call unless frames were too
// large for their slots (one recvmmsg per run of them). It returns how
// many frames it took, whether it stopped at the batch limit with more
// ready, and an error the kernel reported while copied frames were read
// (ENETDOWN, say), or 0. The caller holds q.gate.Owner.
func (q *queue) slotRound(fd int) (n int, more bool, errno unix.Errno) {
	r := q.slots
	if r.mem == nil {
		return 0, false, unix.EBADF // unmapped by Close
	}
	batch := q.e.opts.RXBatch
	for n < batch {
		s, st, ok := r.ready()
		if !ok {
			break
		}
		if n == 0 {
			q.beginRound()
		}
		if st&tpStatusCopy != 0 {
			k, e := q.slotCopies(fd, batch-n)
			if e != 0 && errno == 0 {
				errno = e
			}
			n += k
			continue
		}
		if f, ok := parseSlot(s, st, q.e.vnetHdr); ok {
			q.receive(f.b, f.pt, f.truncated, f.partial)
		} else {
			q.rxErrors.Add(1)
		}
		r.release(s)
		n++
	}
	if n == 0 {
		return 0, false, 0
	}
	q.endRound()
	_, _, more = r.ready()
	return n, more, errno
}

// slotCopies takes the run of ready slots, from the next, whose frames the
// kernel queued on the socket for want of room (TP_STATUS_COPY), at most
// max of them: it reads the frames with one recvmmsg into the landing
// batch, hands them to the round with the packet types their slots hold
// (the copies lack them), hands the slots back and returns how many it
// took. The socket reports a pending error before its queued frames (and
// forgets it), so a read that fails is tried once more and the error
// returned: every copy must leave the queue with its slot, or later ones
// would be matched to the wrong slots.
func (q *queue) slotCopies(fd, max int) (int, unix.Errno) {
	r := q.slots
	lb := q.landing()
	k := 0
	for k < min(max, len(lb.msgs)) {
		_, st, ok := r.peek(k)
		if !ok || st&tpStatusCopy == 0 {
			break
		}
		k++
	}
	got, errno := lb.recvN(fd, k)
	q.rxSyscalls.Add(1)
	pending := unix.Errno(0)
	if errno != 0 && errno != unix.EAGAIN {
		pending = errno
		got, errno = lb.recvN(fd, k)
		q.rxSyscalls.Add(1)
	}
	if errno != 0 {
		got = 0
	}
	for i := range k {
		s, st, _ := r.ready()
		f, ok := parseSlot(s, st, q.e.vnetHdr)
		if i < got && ok {
			q.receive(lb.buf(i), f.pt, lb.truncated(i), f.partial)
		} else {
			q.rxErrors.Add(1)
		}
		r.release(s)
	}
	return k, pending
}

// busyPollSlots is busyPoll's round on the slot ring, with q.gate.Owner
// held: the slots the kernel handed over, with no system call unless a
// frame was copied (failures are the receive goroutine's to find).
func (q *queue) busyPollSlots() int {
	if q.pollSlots == nil {
		q.pollSlots = func(fd uintptr) { q.pollN, _, q.pollErrno = q.slotRound(int(fd)) }
	}
	if q.rc.Control(q.pollSlots) != nil {
		return 0 // closed
	}
	if q.pollErrno != 0 {
		// The socket forgot the error once it reported it: the
		// receive goroutine takes it over.
		q.slotErrno = q.pollErrno
		q.gate.Force()
	}
	if q.pollN > 0 {
		q.gate.CountPolled()
	}
	return q.pollN
}

// pendingError returns the error the kernel left on the socket fd, or
// EAGAIN if none: a ring has no receive call to report one (ENETDOWN when
// the interface went down or away).
func (q *queue) pendingError(fd int) unix.Errno {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	q.rxSyscalls.Add(1)
	switch {
	case err != nil:
		if errno, ok := err.(unix.Errno); ok {
			return errno
		}
		return unix.EINVAL
	case v != 0:
		return unix.Errno(v)
	}
	return unix.EAGAIN
}
