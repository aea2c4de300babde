//go:build linux

package pollcost

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// half is one direction of a loop relay: from's bytes to to, with what
// to has not taken yet.
type half struct {
	from, to int
	buf      []byte
	pending  []byte // read from from, not yet written to to
	eof      bool   // from ended, and to was told
}

// loop is ModeLoop's Relay: one goroutine, a level-triggered epoll over
// duplicates of both descriptors, blocking in epoll_pwait. A direction
// whose destination is full stops reading its source and waits for the
// destination to be writable.
func loop(a, b *net.TCPConn) error {
	fa, err := dupFD(a)
	if err != nil {
		return err
	}
	defer unix.Close(fa)
	fb, err := dupFD(b)
	if err != nil {
		return err
	}
	defer unix.Close(fb)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	defer unix.Close(ep)
	halves := [2]*half{
		{from: fa, to: fb, buf: make([]byte, 64<<10)},
		{from: fb, to: fa, buf: make([]byte, 64<<10)},
	}
	// interest is what fd waits for: reading as a source, writing as a
	// destination with bytes pending.
	interest := func(fd int) uint32 {
		var ev uint32
		for _, h := range halves {
			if h.from == fd && !h.eof && h.pending == nil {
				ev |= unix.EPOLLIN | unix.EPOLLRDHUP
			}
			if h.to == fd && h.pending != nil {
				ev |= unix.EPOLLOUT
			}
		}
		return ev
	}
	// A descriptor that waits for nothing leaves the set: epoll reports
	// hang-ups and errors whatever it was asked, and level-triggered, a
	// socket that was reset after its source ended would be reported
	// again at every wait.
	armed := map[int]uint32{}
	rearm := func(fd int) error {
		ev := interest(fd)
		old, in := armed[fd]
		if in && ev == old || !in && ev == 0 {
			return nil
		}
		op := unix.EPOLL_CTL_MOD
		switch {
		case ev == 0:
			op = unix.EPOLL_CTL_DEL
			delete(armed, fd)
		case !in:
			op = unix.EPOLL_CTL_ADD
			armed[fd] = ev
		default:
			armed[fd] = ev
		}
		e := unix.EpollEvent{Events: ev, Fd: int32(fd)}
		return os.NewSyscallError("epoll_ctl", unix.EpollCtl(ep, op, fd, &e))
	}
	for _, fd := range []int{fa, fb} {
		if err := rearm(fd); err != nil {
			return err
		}
	}
	var events [4]unix.EpollEvent
	for !halves[0].eof || !halves[1].eof {
		n, err := unix.EpollWait(ep, events[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("epoll_wait", err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if ev.Events&unix.EPOLLERR != 0 {
				// A reset or a failure: no direction can go on, and a
				// level-triggered error would be reported forever.
				serr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
				if err != nil {
					return os.NewSyscallError("getsockopt", err)
				}
				if serr != 0 {
					return unix.Errno(serr)
				}
			}
			for _, h := range halves {
				if err := h.step(fd, ev.Events); err != nil {
					return err
				}
			}
		}
		for _, fd := range []int{fa, fb} {
			if err := rearm(fd); err != nil {
				return err
			}
		}
	}
	return nil
}

// step moves h's bytes after fd reported events: writes what is pending
// when fd is h's writable destination, reads and writes on when fd is
// h's readable source.
func (h *half) step(fd int, events uint32) error {
	if fd == h.to && h.pending != nil && events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		if err := h.flush(); err != nil {
			return err
		}
	}
	if fd != h.from || h.eof || h.pending != nil || events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
		return nil
	}
	m, err := unix.Read(h.from, h.buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return nil
	case err != nil:
		return os.NewSyscallError("read", err)
	case m == 0:
		h.eof = true
		return os.NewSyscallError("shutdown", unix.Shutdown(h.to, unix.SHUT_WR))
	}
	h.pending = h.buf[:m]
	return h.flush()
}

// flush writes what is pending, as far as the destination takes it.
func (h *half) flush() error {
	for len(h.pending) > 0 {
		w, err := unix.Write(h.to, h.pending)
		switch {
		case err == unix.EAGAIN:
			return nil // wait for EPOLLOUT
		case err == unix.EINTR:
			continue
		case err != nil:
			return os.NewSyscallError("write", err)
		}
		h.pending = h.pending[w:]
	}
	h.pending = nil
	return nil
}

// dupFD returns a non-blocking duplicate of c's descriptor, which the
// loop owns and closes: c's own stays in Go's poller, unused meanwhile.
func dupFD(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
}
