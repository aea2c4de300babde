//go:build linux

package afpacket

import (
	"sync/atomic"
	"unsafe"
)

// blockStatus is the status word of the block blk, which the kernel and
// the reader hand each other: loading it orders the reads of the block
// after the kernel's writes, storing it orders them before the kernel's
// next ones.
func blockStatus(blk []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&blk[blkStatus]))
}

// slotStatus is the status word of the TPACKET_V2 slot s, as blockStatus
// is a block's.
func slotStatus(s []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s[tp2Status]))
}
