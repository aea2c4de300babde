package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A relay that serves a namespace it was pointed at stops once the
// namespace is gone, as pasta does (without --no-netns-quit): Podman
// stops pasta by deleting the namespace's file, RootlessKit by ending the
// process whose namespace it is. The supervisor opens the watch while it
// still sees the host (an inotify on the file's directory, or a pidfd of
// the process, whose PID means nothing in the relay's PID namespace) and
// hands its descriptor to the relay, which waits on it isolated.

// procNS matches /proc/PID/ns/..., a namespace named by its process: a
// file of procfs, whose deletion inotify does not report.
var procNS = regexp.MustCompile(`^/proc/([0-9]+)/ns/[a-z_]+$`)

// openNSWatch opens what tells that the namespace of netns (a file such
// as /run/netns/NAME or /proc/PID/ns/net) or of process pid (> 0, which
// wins) is gone: a pidfd of the process, or an inotify watching netns's
// directory for its deletion, with the name to look for ("" with a
// pidfd). The namespace must exist still.
func openNSWatch(netns string, pid int) (f *os.File, name string, err error) {
	if pid <= 0 {
		if m := procNS.FindStringSubmatch(netns); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
	}
	if pid > 0 {
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			return nil, "", fmt.Errorf("watch process %d, whose namespace is served: %w", pid, os.NewSyscallError("pidfd_open", err))
		}
		return os.NewFile(uintptr(fd), "pidfd"), "", nil
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, "", fmt.Errorf("watch %s: %w", netns, os.NewSyscallError("inotify_init1", err))
	}
	f = os.NewFile(uintptr(fd), "inotify")
	dir, name := filepath.Split(filepath.Clean(netns))
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("watch %s for the namespace's deletion: %w: give --no-netns-quit to serve it without", dir, os.NewSyscallError("inotify_add_watch", err))
	}
	// Checked once watched, so that a deletion in between is an event.
	if _, err := os.Stat(netns); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("the namespace is gone: %w", err)
	}
	return f, name, nil
}

// nsWatch waits on a descriptor openNSWatch opened, in the relay.
type nsWatch struct {
	f    *os.File
	gone chan struct{}
	wg   sync.WaitGroup
}

// watchNS starts waiting on fd (the relay's, which it takes over): an
// inotify watching for name's deletion, or a pidfd when name is "". gone
// is closed once the namespace is gone.
func watchNS(fd int, name string) (*nsWatch, error) {
	w := &nsWatch{f: os.NewFile(uintptr(fd), "nswatch"), gone: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("namespace watch: %w", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if name == "" {
			// A pidfd reads as nothing: it polls readable once the
			// process has exited.
			err := rc.Read(func(fd uintptr) bool {
				n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
				return err == nil && n > 0
			})
			if err == nil {
				close(w.gone)
			}
			return
		}
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := w.f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					close(w.gone) // the watch broke: the namespace can no longer be told apart from gone
				}
				return
			}
			if inotifyGone(buf[:n], name) {
				close(w.gone)
				return
			}
		}
	}()
	return w, nil
}

// inotifyGone reports whether the events in b say name was deleted or
// moved away, or its directory was.
func inotifyGone(b []byte, name string) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(b[4:8])
		n := int(binary.NativeEndian.Uint32(b[12:16]))
		if len(b) < unix.SizeofInotifyEvent+n {
			return false
		}
		// The name is a C string, NUL-padded.
		ev := b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+n]
		if i := bytes.IndexByte(ev, 0); i >= 0 {
			ev = ev[:i]
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 || mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 && string(ev) == name {
			return true
		}
		b = b[unix.SizeofInotifyEvent+n:]
	}
	return false
}

// close stops waiting. Idempotent.
func (w *nsWatch) close() {
	w.f.Close()
	w.wg.Wait()
}
