//go:build linux

package tun

import (
	"unsafe"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// txIovecs is how many pieces one write gathers from the stack frame: the
// virtio-net header, the packet's header view and its payload views. A
// bulk TCP super-segment's payload sits in gVisor chunks of up to 64 KiB,
// so a handful of views is the rule; 64 iovecs (1 KiB of stack) leave
// room for a sender that wrote in small pieces. A packet in more pieces is
// copied flat first (writeFlat).
const txIovecs = 64

// writePacket writes hdr (empty without the virtio-net header) and the
// packet's bytes with one writev(2) on fd, without copying the payload.
// The packet stays the caller's. It returns the errno, 0 on success.
func writePacket(fd int, hdr []byte, pkt *stack.PacketBuffer) unix.Errno {
	var iov [txIovecs]unix.Iovec
	n := 0
	if len(hdr) > 0 {
		iov[0].Base = &hdr[0]
		iov[0].SetLen(len(hdr))
		n = 1
	}
	n, fits := appendViews(iov[:], n, pkt)
	if !fits {
		return writeFlat(fd, hdr, pkt)
	}
	if n == 0 {
		return unix.EINVAL
	}
	_, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
	return errno
}

// appendViews points iov[n:] at the packet's bytes, one iovec per view,
// and returns how many of iov are then in use; fits is false if the views
// do not fit in iov (the caller then writes the packet another way). The
// iovecs point into the packet, which must outlive their use.
func appendViews(iov []unix.Iovec, n int, pkt *stack.PacketBuffer) (int, bool) {
	vl, off := pkt.AsViewList()
	for v := vl.Front(); v != nil; v = v.Next() {
		s := v.AsSlice()
		if off >= len(s) {
			off -= len(s)
			continue
		}
		s, off = s[off:], 0
		if n == len(iov) {
			return n, false
		}
		iov[n].Base = &s[0]
		iov[n].SetLen(len(s))
		n++
	}
	return n, true
}

// writeFlat writes a packet in more than txIovecs pieces from one flat
// copy.
func writeFlat(fd int, hdr []byte, pkt *stack.PacketBuffer) unix.Errno {
	flat := pkt.ToView()
	defer flat.Release()
	var iov [2]unix.Iovec
	n := 0
	if len(hdr) > 0 {
		iov[0].Base = &hdr[0]
		iov[0].SetLen(len(hdr))
		n = 1
	}
	b := flat.AsSlice()
	iov[n].Base = &b[0]
	iov[n].SetLen(len(b))
	n++
	_, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
	return errno
}
