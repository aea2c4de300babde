//go:build linux

package tun

import (
	"errors"
	"os"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/testenv"
)

// kernelURing finds out, on its own and once, whether this kernel offers
// io_uring as the queues' rings need it: io_uring_setup works (not ENOSYS,
// not refused by kernel.io_uring_disabled) with a single mmap for both
// rings (Linux 5.4). It is the tests' reference for the rings' own setup,
// so that a ring that fails to set up where the kernel offers one fails a
// test instead of skipping it.
var kernelURing = sync.OnceValue(func() error {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return os.NewSyscallError("io_uring_setup", errno)
	}
	unix.Close(int(fd))
	if p.features&ioringFeatSingleMmap == 0 {
		return errors.New("io_uring without IORING_FEAT_SINGLE_MMAP (a kernel before 5.4)")
	}
	return nil
})

// requireRing ends the test where the kernel offers no io_uring the rings
// can use (a skip, through testenv), and fails it where the kernel does
// but the queue has no ring (have false).
func requireRing(tb testing.TB, have bool) {
	tb.Helper()
	if err := kernelURing(); err != nil {
		testenv.Skip(tb, "this kernel offers no io_uring the rings can use: %v", err)
	}
	if !have {
		tb.Fatal("the kernel offers io_uring, but the queue set up no ring")
	}
}
