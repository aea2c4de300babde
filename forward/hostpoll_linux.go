package forward

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostPoller wakes the host side of parked TCP relays: one epoll instance
// per Forwarder holds the host socket of every relay whose host-to-peer
// direction is waiting for data, each armed once (EPOLLONESHOT), and one
// goroutine serves it, parked in Go's runtime poller on the epoll
// descriptor itself, so that an idle flow holds no goroutine. Go's poller
// has no callback API, hence an epoll of our own; the sockets stay in
// Go's poller too, for the waits of a running pump. It is safe for
// concurrent use.
type hostPoller struct {
	file *os.File // the epoll descriptor; Close ends loop
	rc   syscall.RawConn

	mu    sync.Mutex
	next  uint64               // the last relay id handed out
	pumps map[uint64]*hostPump // by id, while registered
}

// pollEvents is what wakes a parked host-to-peer direction: data, the
// host's FIN (EPOLLRDHUP), and (always reported) errors and hang-ups.
const pollEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT

// pollBatch is how many readiness events one epoll_wait takes: a burst
// larger than that takes another call before the goroutine parks again.
const pollBatch = 128

// hostPoll returns the Forwarder's host poller, starting it (and its
// goroutine, which Close stops and joins) on first use.
func (f *Forwarder) hostPoll() (*hostPoller, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hp != nil {
		return f.hp, nil
	}
	if f.state == closed {
		return nil, errors.New("forward: host poller: the Forwarder is closed")
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("forward: host poller: %w", os.NewSyscallError("epoll_create1", err))
	}
	// Non-blocking, so that os.NewFile hands it to the runtime poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("forward: host poller: %w", os.NewSyscallError("fcntl", err))
	}
	file := os.NewFile(uintptr(epfd), "forward-epoll")
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("forward: host poller: %w", err)
	}
	hp := &hostPoller{file: file, rc: rc, pumps: map[uint64]*hostPump{}}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		hp.loop()
	}()
	// Close runs this after aborting the flows, before it waits.
	f.closers = append(f.closers, func() { file.Close() })
	f.hp = hp
	return hp, nil
}

// loop wakes the relays whose host sockets are ready, until the epoll
// descriptor is closed.
func (hp *hostPoller) loop() {
	var events [pollBatch]unix.EpollEvent
	for {
		var werr error
		err := hp.rc.Read(func(fd uintptr) bool {
			for {
				n, err := unix.EpollWait(int(fd), events[:], 0)
				switch {
				case err == unix.EINTR:
					continue
				case err != nil:
					werr = err
					return true
				}
				for _, ev := range events[:n] {
					hp.wake(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
				}
				if n < len(events) {
					// Drained: park until the epoll descriptor is
					// readable again.
					return false
				}
			}
		})
		if err != nil || werr != nil {
			return // closed (a failing epoll_wait cannot recover either)
		}
	}
}

// wake starts the host-to-peer pump of relay id, if it is still
// registered (an event may outlive its relay).
func (hp *hostPoller) wake(id uint64) {
	hp.mu.Lock()
	p := hp.pumps[id]
	hp.mu.Unlock()
	if p != nil {
		p.wakeDown()
	}
}

// add registers p and gives it its id.
func (hp *hostPoller) add(p *hostPump) {
	hp.mu.Lock()
	hp.next++
	p.id = hp.next
	hp.pumps[p.id] = p
	hp.mu.Unlock()
}

// remove forgets p. Its socket leaves the epoll set when it is closed
// (the relay holds the only descriptor of it).
func (hp *hostPoller) remove(p *hostPump) {
	hp.mu.Lock()
	delete(hp.pumps, p.id)
	hp.mu.Unlock()
}

// arm asks for one wake-up of p once its host socket is readable (at
// once if it is already): op is EPOLL_CTL_ADD the first time,
// EPOLL_CTL_MOD after. It fails once the socket or the poller is closed.
func (hp *hostPoller) arm(p *hostPump, op int) error {
	ev := unix.EpollEvent{Events: pollEvents, Fd: int32(uint32(p.id)), Pad: int32(uint32(p.id >> 32))}
	var err error
	// Both descriptors are held open (Control) while epoll_ctl names
	// them, so a concurrent Close cannot hand a reused number to it.
	cerr := p.rc.Control(func(fd uintptr) {
		if perr := hp.rc.Control(func(epfd uintptr) {
			err = unix.EpollCtl(int(epfd), op, int(fd), &ev)
		}); perr != nil {
			err = perr
		}
	})
	if cerr != nil {
		return cerr
	}
	if errno, ok := err.(syscall.Errno); ok {
		return os.NewSyscallError("epoll_ctl", errno)
	}
	return err
}
