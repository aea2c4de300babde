package linkutil

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Watcher is the writability watcher of one transmit queue whose file
// descriptor is registered with Go's runtime poller: after a write the
// queue refused for lack of room, it parks a goroutine in the poller until
// the descriptor is writable again and then calls the endpoint's
// writability callback (sched.WritableNotifier). The goroutine starts at
// the first refusal, so an endpoint that is never full (a TUN device,
// nearly always) keeps none; the endpoint owns it from then on, counts it
// and joins it in Close. The zero value is ready; it is safe for
// concurrent use.
type Watcher struct {
	// want is set by a refusal and cleared when the watcher signals, so a
	// signal answers a refusal and a wake-up without one signals nothing.
	want    atomic.Bool
	once    sync.Once
	kick    chan struct{} // wakes the goroutine; made once
	running bool          // the goroutine was started; guarded by the Lifecycle's lock
}

func (w *Watcher) ch() chan struct{} {
	w.once.Do(func() { w.kick = make(chan struct{}, 1) })
	return w.kick
}

// Refused records that a write was refused for lack of room and wakes the
// watcher. The first time, it starts the watcher by calling start (which
// counts the goroutine and runs WatchLoop in it) through l.IfOpen, so that
// none starts once Close has begun waiting for the endpoint's goroutines.
// Setting want before the kick means the watcher looks for room after the
// refusal, so room made in between is not missed.
func (w *Watcher) Refused(l *Lifecycle, start func()) {
	w.want.Store(true)
	l.IfOpen(func() {
		if !w.running {
			w.running = true
			start()
		}
	})
	select {
	case w.ch() <- struct{}{}:
	default:
	}
}

// WatchLoop is the watcher goroutine's body: woken by a refusal, it parks
// in the runtime poller until rc's descriptor is writable (POLLOUT: for a
// socket, the kernel holds less than half its send buffer of ours), then
// calls notify if a write was refused since the last call. notify runs
// with no lock held. WatchLoop returns when stop is closed or the
// descriptor is.
func (w *Watcher) WatchLoop(rc syscall.RawConn, stop <-chan struct{}, notify func()) {
	var pfd [1]unix.PollFd
	writable := func(fd uintptr) bool {
		for {
			pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
			n, err := unix.Poll(pfd[:], 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Any event counts, POLLERR and POLLHUP too: the next write
			// then succeeds or fails for good, and either is what the
			// writer must learn. A failed poll counts too, never as a
			// reason to wait.
			return err != nil || n > 0
		}
	}
	kick := w.ch()
	for {
		select {
		case <-kick:
		case <-stop:
			return
		}
		// rc.Write arms the poller before it first calls writable, so room
		// made after the check wakes it: no lost wake-up.
		if err := rc.Write(writable); err != nil {
			return // closed
		}
		if w.want.Swap(false) {
			notify()
		}
	}
}
