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

// rxBatchSize is the bytes a landing batch of n messages holds, for the
// cache's cap.
func rxBatchSize(n int, aux bool) int {
	b := n * (rxBufSize + int(unsafe.Sizeof(unix.Mmsghdr{})) + int(unsafe.Sizeof(unix.Iovec{})) + unix.SizeofSockaddrLinklayer)
	if aux {
		b += n * auxSpace
	}
	return b
}

// size returns the bytes the scratch's arrays hold, for the cache's cap.
func (s *txScratch) size() int {
	return cap(s.msgs)*int(unsafe.Sizeof(unix.Mmsghdr{})) + cap(s.iovs)*int(unsafe.Sizeof(unix.Iovec{})) +
		cap(s.vhdrs) + cap(s.starts)*int(unsafe.Sizeof(0)) + cap(s.lasts) + cap(s.sizes)*int(unsafe.Sizeof(0)) + cap(s.hdrs) + cap(s.flat)*int(unsafe.Sizeof(uintptr(0)))
}

// newRXBatch makes a landing batch of n messages, each header pointing at
// its buffer, address and (with aux) control buffer.
func newRXBatch(n int, aux bool) *rxBatch {
	r := &rxBatch{
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
