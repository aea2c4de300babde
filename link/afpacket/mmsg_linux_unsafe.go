//go:build linux

package afpacket

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendmmsg sends msgs on fd without blocking and returns how many were
// sent. x/sys/unix has no wrapper for it.
func sendmmsg(fd int, msgs []unix.Mmsghdr) (int, unix.Errno) {
	r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd),
		uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

// recvmmsg reads up to len(msgs) frames from fd without blocking and
// returns how many it read (EAGAIN if none was there).
func recvmmsg(fd int, msgs []unix.Mmsghdr) (int, unix.Errno) {
	r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd),
		uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

var (
	// auxDataSize is struct tpacket_auxdata.
	auxDataSize = int(unsafe.Sizeof(unix.TpacketAuxdata{}))
	// auxSpace is the control buffer each message gets for it.
	auxSpace = unix.CmsgSpace(auxDataSize)
)

// rxRing is one queue's landing area: RXBatch buffers of rxBufSize bytes in
// one slab, with a message header, an iovec, a link-layer address (for the
// packet type) and, without the virtio-net header, a control buffer (for
// PACKET_AUXDATA) each. It belongs to the queue's receive goroutine and is
// reused for every round.
type rxRing struct {
	slab  []byte
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrLinklayer
	ctrl  []byte // nil unless aux
	used  int    // messages the last recvmmsg filled in
}

// newRXRingSize is the bytes a ring of n messages holds, for the cache's
// cap.
func newRXRingSize(n int, aux bool) int {
	b := n * (rxBufSize + int(unsafe.Sizeof(unix.Mmsghdr{})) + int(unsafe.Sizeof(unix.Iovec{})) + unix.SizeofSockaddrLinklayer)
	if aux {
		b += n * auxSpace
	}
	return b
}

// size returns the bytes the ring holds.
func (r *rxRing) size() int { return newRXRingSize(len(r.msgs), r.ctrl != nil) }

// reset readies the ring for its next owner: every message header is
// restored before the next read. The landing buffers need no clearing:
// a round reads only what the kernel wrote into them in that round.
func (r *rxRing) reset() { r.used = len(r.msgs) }

// size returns the bytes the scratch's arrays hold, for the cache's cap.
func (s *txScratch) size() int {
	return cap(s.msgs)*int(unsafe.Sizeof(unix.Mmsghdr{})) + cap(s.iovs)*int(unsafe.Sizeof(unix.Iovec{})) +
		cap(s.vhdrs) + cap(s.starts)*int(unsafe.Sizeof(0)) + cap(s.flat)*int(unsafe.Sizeof(uintptr(0)))
}

func newRXRing(n int, aux bool) *rxRing {
	r := &rxRing{
		slab:  make([]byte, n*rxBufSize),
		msgs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrLinklayer, n),
		used:  n,
	}
	if aux {
		r.ctrl = make([]byte, n*auxSpace)
	}
	for i := range r.msgs {
		r.iovs[i].Base = &r.slab[i*rxBufSize]
		r.iovs[i].SetLen(rxBufSize)
		h := &r.msgs[i].Hdr
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		if aux {
			h.Control = &r.ctrl[i*auxSpace]
		}
	}
	return r
}

// recv reads a round from fd, first restoring the header fields that the
// previous round's messages had overwritten.
func (r *rxRing) recv(fd int) (int, unix.Errno) {
	for i := range r.used {
		m := &r.msgs[i]
		m.Len = 0
		m.Hdr.Namelen = unix.SizeofSockaddrLinklayer
		m.Hdr.Flags = 0
		if r.ctrl != nil {
			m.Hdr.SetControllen(auxSpace)
		}
	}
	n, errno := recvmmsg(fd, r.msgs)
	switch errno {
	case 0:
		r.used = n
	case unix.EAGAIN:
		r.used = 0 // the kernel wrote nothing
	default:
		r.used = len(r.msgs) // it may have written anything: restore all
	}
	return n, errno
}

// buf returns the bytes message i received.
func (r *rxRing) buf(i int) []byte {
	off := i * rxBufSize
	return r.slab[off : off+min(int(r.msgs[i].Len), rxBufSize)]
}

// truncated reports whether message i did not fit its buffer.
func (r *rxRing) truncated(i int) bool { return r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// pktType returns message i's sll_pkttype; a socket that reports no
// link-layer address (a test's socketpair) gets PACKET_HOST.
func (r *rxRing) pktType(i int) uint8 {
	if r.msgs[i].Hdr.Namelen < unix.SizeofSockaddrLinklayer || r.names[i].Family != unix.AF_PACKET {
		return unix.PACKET_HOST
	}
	return r.names[i].Pkttype
}

// partial reports whether PACKET_AUXDATA says message i's checksum is
// partial (TP_STATUS_CSUMNOTREADY).
func (r *rxRing) partial(i int) bool {
	if r.ctrl == nil {
		return false
	}
	n := min(int(r.msgs[i].Hdr.Controllen), auxSpace)
	st, ok := auxStatus(r.ctrl[i*auxSpace : i*auxSpace+n])
	return ok && st&unix.TP_STATUS_CSUMNOTREADY != 0
}

// auxStatus finds the tpacket_auxdata control message in b and returns
// its tp_status.
func auxStatus(b []byte) (uint32, bool) {
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return 0, false
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && l >= unix.CmsgLen(auxDataSize) {
			aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&b[unix.CmsgLen(0)]))
			return aux.Status, true
		}
		b = b[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(b)):]
	}
	return 0, false
}
