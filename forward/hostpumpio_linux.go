package forward

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// The I/O of a hostPump (see hostpump_linux.go for its states): the
// runners that copy each direction, and the non-blocking reader and writer
// of the host socket that gVisor's endpoint calls.

// hostLinger is how long a runner waits for more before parking: a
// host-to-peer one that moved data waits on the host socket itself, a
// peer-to-host one on a channel the waiter callback signals. Long against
// a request/response exchange through the sandbox (tens of microseconds,
// scripts/tun-rr.sh), short against a flow's idle life: idle flows hold
// no goroutine while an active one is served by the same goroutines, as
// when each direction had its own, without a new goroutine (and the
// poller's extra hand-off) per message.
const hostLinger = 50 * time.Millisecond

// upLoop copies from the peer to the host while there is data, then
// parks; a goroutine counted in the Forwarder's, started by wakeUp.
func (p *hostPump) upLoop() {
	defer p.c.fl.f.wg.Done()
	ep := p.c.ep
	w := newHostWriter(p.rc)
	poller := p.c.fl.f.st.Poller()
	// Signalled by wakeUp from here on, so data that comes after a read
	// found none is never missed.
	wake := make(chan struct{}, 1)
	p.setUpWake(wake)
	// The linger is re-armed when it fires, not per message.
	linger := time.NewTimer(hostLinger)
	defer linger.Stop()
	moved := false // since the linger was armed
	ready := func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		return ep.Readiness(upEvents) != 0
	}
	for {
		w.full, w.err = false, nil
		res, terr := ep.Read(w, tcpip.ReadOptions{})
		p.c.countUp(res.Count)
		switch terr.(type) {
		case nil, *tcpip.ErrBadBuffer:
			// ErrBadBuffer: the host socket took nothing (full or failed).
			moved = true
			if w.err != nil {
				p.abort(true)
				p.end(&p.up)
				return
			}
			if w.full && !p.waitHost() {
				p.end(&p.up)
				return
			}
		case *tcpip.ErrWouldBlock:
			// With busy polling on, spin on the links for the next
			// segment before parking (a request/response flow saves
			// two goroutine wake-ups per exchange).
			if poller.Wait(ready) {
				continue
			}
			if !p.lingerUp(wake, linger, &moved) {
				return
			}
		case *tcpip.ErrClosedForReceive:
			// The peer sent FIN: pass the half-close on.
			p.host.CloseWrite()
			p.end(&p.up)
			return
		default:
			// Reset by the peer, or aborted.
			p.abort(true)
			p.end(&p.up)
			return
		}
	}
}

// lingerUp waits for the peer's next data, then parks the direction once
// a whole hostLinger passed without any; false means the runner must end
// (parked or ended).
func (p *hostPump) lingerUp(wake chan struct{}, t *time.Timer, moved *bool) bool {
	for {
		select {
		case <-wake:
			return true
		case <-p.done:
			p.end(&p.up)
			return false
		case <-t.C:
		}
		if !*moved {
			break
		}
		*moved = false
		t.Reset(hostLinger)
	}
	p.mu.Lock()
	if p.aborted {
		p.mu.Unlock()
		p.end(&p.up)
		return false
	}
	p.up, p.upWake = parked, nil
	p.mu.Unlock()
	// A wake-up sent before the park is the runner's to serve, unless a
	// new runner was started meanwhile.
	select {
	case <-wake:
	default:
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up != parked || p.aborted {
		return false
	}
	p.up, p.upWake = running, wake
	t.Reset(hostLinger)
	return true
}

// downLoop is a host-to-peer runner: a goroutine counted in the
// Forwarder's, started by wakeDown.
func (p *hostPump) downLoop() {
	defer p.c.fl.f.wg.Done()
	p.pumpDown()
}

// pumpDown copies from the host to the peer while there is data, lingering
// hostLinger for more, then parks.
func (p *hostPump) pumpDown() {
	d := downRunner{p: p, rd: hostReader{rc: p.rc}}
	d.round = d.roundLocked // bound once: rc.Read then allocates nothing
	lb := landingPool.Get().(*[downLanding]byte)
	d.buf = lb[:]
	defer func() {
		landingPool.Put(lb)
		if d.waitsRoom {
			p.c.wq.EventUnregister(&d.room)
		}
	}()
	p.host.SetReadDeadline(time.Now().Add(hostLinger))
	for {
		// A new rc.Read resets the poller's readiness, so its first
		// call reads (or probes) the socket.
		d.wait, d.eof, d.herr = false, false, nil
		err := p.rc.Read(d.round)
		if err == nil {
			err = d.herr
		}
		switch {
		case d.over:
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			if d.moved {
				d.moved = false
				p.host.SetReadDeadline(time.Now().Add(hostLinger))
				continue
			}
			p.host.SetReadDeadline(time.Time{})
			if !p.park(&p.down) {
				return
			}
			op := unix.EPOLL_CTL_MOD
			if !p.inPoller {
				op, p.inPoller = unix.EPOLL_CTL_ADD, true
			}
			if err := p.hp.arm(p, op); err != nil {
				// Closed by abort, or epoll failed: end both sides
				// (abort ends the parked direction).
				p.abort(false)
			}
			return
		case err != nil && isReset(err):
			p.abort(true)
			p.end(&p.down)
			return
		case err != nil:
			// Closed by abort, or a host error: end both sides.
			p.abort(false)
			p.end(&p.down)
			return
		case d.eof:
			p.c.ep.Shutdown(tcpip.ShutdownWrite)
			p.end(&p.down)
			return
		}
	}
}

// downLanding is the size of a host-to-peer runner's landing buffer, which
// a read that may find data lands in: a request/response message fits
// (sockperf's 64 bytes, an HTTP request), so such an exchange costs one
// read system call and a copy of a few bytes, where asking the socket
// how much it holds first (SIOCINQ) costs a second call. A read that fills
// it means a stream: its next reads go straight into gVisor's send buffer.
const downLanding = 4096

// landingPool holds the landing buffers of runners: an idle (parked) flow
// holds none.
var landingPool = sync.Pool{New: func() any { return new([downLanding]byte) }}

// downRunner is the state of a host-to-peer runner, whose rounds run
// inside the host socket's rc.Read (roundLocked): they read what the host
// sent and write it into the endpoint, then wait on the runtime poller in
// the same rc.Read.
type downRunner struct {
	p     *hostPump
	round func(fd uintptr) bool
	buf   []byte // the landing buffer
	br    bytes.Reader
	rd    hostReader

	// The wait for room in the endpoint's send buffer, registered the
	// first time it is full.
	room      waiter.Entry
	roomCh    chan struct{}
	waitsRoom bool

	// stream says that the last read filled buf: the next round asks
	// the socket how much it holds and reads that into gVisor directly.
	stream bool
	// wait says that the socket was drained in this rc.Read, so the
	// next call of the round waits for the poller without a system call:
	// data (or a FIN or an error) that comes after a read emptied the
	// socket readies the poller again, and only a new rc.Read forgets it.
	wait  bool
	moved bool // data since the read deadline was set
	eof   bool // the host sent FIN
	herr  error
	over  bool // the direction ended inside the round
}

// roundLocked is the callback of the runner's rc.Read: it copies from the
// host socket to the endpoint while data is there and returns false (wait
// for readiness) once the socket is empty; true at the host's FIN, a
// failure (herr), or when the direction ended (over).
func (d *downRunner) roundLocked(fd uintptr) bool {
	for {
		if d.wait {
			d.wait = false
			return false
		}
		if d.stream {
			n, e := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			if e == nil && n > 0 {
				d.moved = true
				if !d.writeAnnounced(n) {
					return true
				}
				// Everything the socket held when asked went
				// in: what came since readied the poller.
				d.wait = true
				continue
			}
			d.stream = false
		}
		m, e := unix.Read(int(fd), d.buf)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e != nil:
			d.herr = e
			return true
		case m == 0:
			d.eof = true
			return true
		}
		d.moved = true
		if !d.writeBytes(d.buf[:m]) {
			return true
		}
		// A short read emptied the socket; a full one may have left
		// more.
		d.wait, d.stream = m < len(d.buf), m == len(d.buf)
	}
}

// writeBytes writes b, read from the host, into the endpoint, waiting for
// room as needed; false means the direction ended.
func (d *downRunner) writeBytes(b []byte) bool {
	d.br.Reset(b)
	for d.br.Len() > 0 {
		n, terr := d.p.c.ep.Write(&d.br, tcpip.WriteOptions{})
		d.p.c.countDown(int(n))
		if !d.wrote(terr, nil) {
			return false
		}
	}
	return true
}

// writeAnnounced reads the n bytes the host socket holds straight into the
// endpoint's send buffer, waiting for room as needed; false means the
// direction ended.
func (d *downRunner) writeAnnounced(avail int) bool {
	for avail > 0 {
		d.rd.n, d.rd.err = avail, nil
		n, terr := d.p.c.ep.Write(&d.rd, tcpip.WriteOptions{})
		avail -= int(n)
		d.p.c.countDown(int(n))
		if !d.wrote(terr, d.rd.err) {
			return false
		}
	}
	return true
}

// wrote handles the outcome of one write into the endpoint: terr, and
// herr, the host socket's read failure during it; false means the
// direction ended.
func (d *downRunner) wrote(terr tcpip.Error, herr error) bool {
	p := d.p
	switch terr.(type) {
	case nil:
		if herr != nil {
			p.abort(isReset(herr))
			p.end(&p.down)
			d.over = true
			return false
		}
		return true
	case *tcpip.ErrWouldBlock:
		if !d.waitsRoom {
			// Register, then try again: room that came meanwhile
			// sent no notification.
			d.room, d.roomCh = waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
			p.c.wq.EventRegister(&d.room)
			d.waitsRoom = true
			return true
		}
		select {
		case <-d.roomCh:
			return true
		case <-p.done:
			p.end(&p.down)
			d.over = true
			return false
		}
	default:
		// Reset, or the peer closed for good (or we aborted): the host
		// must not think its data arrived.
		p.abort(true)
		p.end(&p.down)
		d.over = true
		return false
	}
}

// waitHost parks until the host socket is writable; false means the pump
// is over.
func (p *hostPump) waitHost() bool {
	err := p.rc.Write(func(fd uintptr) bool {
		// poll(2) checks the level after the poller was re-armed.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	if err != nil {
		p.abort(false)
		return false
	}
	return true
}

// hostWriter writes to the host socket without blocking: gVisor calls it
// with its endpoint locked, which must not wait for the host. It is made
// once per runner (newHostWriter), and a write allocates nothing: the
// callback rc.Control runs is bound once, and its arguments and results
// travel in the struct (a closure capturing them would escape to the heap
// on every write, three objects per message).
type hostWriter struct {
	rc   syscall.RawConn
	full bool  // the socket's buffer filled up
	err  error // the socket failed

	write func(fd uintptr) // w.writeFD, bound once
	b     []byte           // what write writes
	n     int              // what it wrote
	errno error            // how it failed
}

// newHostWriter returns a hostWriter for the host socket behind rc.
func newHostWriter(rc syscall.RawConn) *hostWriter {
	w := &hostWriter{rc: rc}
	w.write = w.writeFD
	return w
}

var errWouldBlock = errors.New("host socket buffer full")

// writeFD is the one write system call of Write, run by rc.Control, which
// holds the descriptor open. Control, not rc.Write: the write never waits
// for the poller (a full socket is reported, not waited for), so the
// poller's write lock and readiness reset are work for nothing.
func (w *hostWriter) writeFD(fd uintptr) {
	w.n, w.errno = unix.Write(int(fd), w.b)
}

// Write implements io.Writer: it writes what the socket takes now and
// reports errWouldBlock (with full set) for the rest.
func (w *hostWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		w.b = p[done:]
		err := w.rc.Control(w.write)
		w.b = nil // hold no view of gVisor's past the call
		if err != nil {
			w.err = err
			return done, err
		}
		switch e := w.errno; {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			w.full = true
			return done, errWouldBlock
		case e != nil:
			w.err = e
			return done, e
		}
		done += w.n
	}
	return done, nil
}

// hostReader is a tcpip.Payloader that reads exactly n bytes from the host
// socket, which the socket already holds (SIOCINQ): gVisor's endpoint
// reads it straight into its send buffer. gVisor keeps reading until it
// has the count it asked for, so a short read is reported as an error.
// It reads under Control, not Read: the data is there, and the read
// deadline of the lingering runner must not fail it.
type hostReader struct {
	rc  syscall.RawConn
	n   int
	err error
}

// Len implements tcpip.Payloader.
func (r *hostReader) Len() int { return r.n }

var errShortRead = errors.New("host socket returned less than it announced")

// Read implements io.Reader, reading at most the n bytes announced.
func (r *hostReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, nil
	}
	if len(p) > r.n {
		p = p[:r.n]
	}
	done := 0
	for done < len(p) {
		var n int
		var e error
		if err := r.rc.Control(func(fd uintptr) {
			n, e = unix.Read(int(fd), p[done:])
		}); err != nil {
			r.err = err
			return done, err
		}
		switch {
		case e == unix.EINTR:
			continue
		case e != nil:
			// EAGAIN included: the socket had announced the bytes.
			r.err = e
			return done, e
		case n == 0:
			r.err = errShortRead
			return done, errShortRead
		}
		done += n
	}
	r.n -= done
	return done, nil
}

// isReset reports an error that means the host peer reset the connection.
func isReset(err error) bool {
	return errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}
