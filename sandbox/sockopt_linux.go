package sandbox

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketControl is a net.Dialer's and net.ListenConfig's Control that
// binds each socket to the interface dev (SO_BINDTODEVICE, which a socket
// not yet bound to one takes without privilege since Linux 5.7) and marks
// it (SO_MARK, which takes CAP_NET_ADMIN or, since Linux 5.17,
// CAP_NET_RAW): Config.Interface and Config.Mark. nil without either.
func socketControl(dev string, mark uint32) func(network, address string, c syscall.RawConn) error {
	if dev == "" && mark == 0 {
		return nil
	}
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if dev != "" {
				if err := unix.BindToDevice(int(fd), dev); err != nil {
					serr = fmt.Errorf("bind the socket to interface %s: %w", dev, os.NewSyscallError("setsockopt SO_BINDTODEVICE", err))
					return
				}
			}
			if mark != 0 {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)); err != nil {
					serr = fmt.Errorf("mark the socket %#x: %w: marks take root (CAP_NET_ADMIN, or CAP_NET_RAW since Linux 5.17)", mark, os.NewSyscallError("setsockopt SO_MARK", err))
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}
