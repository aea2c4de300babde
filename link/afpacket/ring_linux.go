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
func (r *ring) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
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
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		q.rxSyscalls.Add(1)
		switch {
		case err != nil:
			if errno, ok := err.(unix.Errno); ok {
				return 0, errno
			}
			return 0, unix.EINVAL
		case v != 0:
			return 0, unix.Errno(v)
		}
		return 0, unix.EAGAIN
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
