package sandbox

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handleTCP takes a connection the sandbox opened (a SYN gVisor's
// forwarder passed on, in a goroutine of the forwarder's): it connects to
// the host-side destination first and completes the sandbox's handshake
// only if that worked, so the sandbox sees a reset where the real
// destination refused.
func (s *Sandbox) handleTCP(r *tcp.ForwarderRequest) {
	if !s.begin() {
		r.Complete(true)
		return
	}
	defer s.wg.Done()
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	to, dns, reason, ok := s.pol.target(dst)
	if !ok {
		s.refuse(reason)
		r.Complete(true)
		return
	}
	if reason, ok := s.reserveFlow(&s.c.tcpFlows, s.cfg.MaxTCP, TCPLimit); !ok {
		s.refuse(reason)
		r.Complete(true)
		return
	}
	released := false
	release := func() {
		if !released {
			released = true
			s.c.tcpFlows.Add(-1)
		}
	}
	defer release()
	if !s.takeHalfOpen(to) {
		s.refuse(HalfOpen)
		r.Complete(true)
		return
	}
	d := net.Dialer{Timeout: s.cfg.ConnectTimeout}
	hc, err := d.DialContext(s.ctx, "tcp", to.String())
	s.releaseHalfOpen(to)
	if err != nil {
		s.c.connectFailed.Add(1)
		r.Complete(true)
		return
	}
	host := hc.(*net.TCPConn)
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	r.Complete(false)
	if terr != nil {
		// The sandbox gave up on the handshake meanwhile.
		host.SetLinger(0)
		host.Close()
		return
	}
	if dns {
		s.c.dns.Add(1)
	}
	released = true // the relay owns the flow's count now
	s.c.tcpOpened.Add(1)
	s.relay(ep, &wq, host)
}

// takeHalfOpen counts a host-side connect to to, unless to already has
// its share of the half-open limit: a SYN flood towards one unresponsive
// destination then holds a quarter of the forwarder's slots at most, and
// connections elsewhere still get through while it lasts.
func (s *Sandbox) takeHalfOpen(to netip.AddrPort) bool {
	share := max(1, s.cfg.MaxHalfOpen/4)
	s.halfMu.Lock()
	defer s.halfMu.Unlock()
	if s.halfByDst[to] >= share {
		return false
	}
	s.halfByDst[to]++
	s.c.halfOpen.Add(1)
	return true
}

func (s *Sandbox) releaseHalfOpen(to netip.AddrPort) {
	s.halfMu.Lock()
	defer s.halfMu.Unlock()
	if s.halfByDst[to]--; s.halfByDst[to] <= 0 {
		delete(s.halfByDst, to)
	}
	s.c.halfOpen.Add(-1)
}

// reserveFlow takes one of a protocol's flows and one of the total, or
// reports the limit that stood in the way.
func (s *Sandbox) reserveFlow(proto interface{ Add(int64) int64 }, max int, r Reason) (Reason, bool) {
	if n := s.c.tcpFlows.Load() + s.c.udpFlows.Load(); n >= int64(s.cfg.MaxFlows) {
		return FlowLimit, false
	}
	if proto.Add(1) > int64(max) {
		proto.Add(-1)
		return r, false
	}
	return 0, true
}

// tcpRelay carries one TCP connection between a gVisor endpoint (the
// sandbox's side) and a host socket.
type tcpRelay struct {
	s    *Sandbox
	ep   tcpip.Endpoint
	wq   *waiter.Queue
	host *net.TCPConn
	rc   syscall.RawConn
	done chan struct{} // closed by abort
	once sync.Once
}

// relay runs the connection until both directions have ended: the
// sandbox-to-host pump in a goroutine of its own, the other in the
// caller's, which must be one the Sandbox waits for in Close. The host
// connection, the endpoint and one of s.c.tcpFlows are the relay's from
// here on.
func (s *Sandbox) relay(ep tcpip.Endpoint, wq *waiter.Queue, host *net.TCPConn) {
	rc, err := host.SyscallConn()
	r := &tcpRelay{s: s, ep: ep, wq: wq, host: host, rc: rc, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed || err != nil {
		s.mu.Unlock()
		r.finish(true)
		return
	}
	s.tcp[r] = struct{}{}
	s.mu.Unlock()
	up := make(chan struct{})
	go func() { defer close(up); r.up() }()
	r.down()
	<-up
	s.mu.Lock()
	delete(s.tcp, r)
	s.mu.Unlock()
	r.finish(false)
}

// finish releases both sides once the pumps are done.
func (r *tcpRelay) finish(reset bool) {
	if reset {
		r.host.SetLinger(0)
		r.ep.Abort()
	}
	r.host.Close()
	r.ep.Close()
	r.s.c.tcpFlows.Add(-1)
}

// abort ends both directions at once; with reset the peers see resets
// (a reset from one side is carried to the other).
func (r *tcpRelay) abort(reset bool) {
	r.once.Do(func() {
		if reset {
			r.s.c.tcpResets.Add(1)
		}
		r.host.SetLinger(0)
		r.ep.Abort()
		close(r.done)
		// Closing wakes a pump waiting on the host socket.
		r.host.Close()
	})
}

// up copies from the sandbox to the host: gVisor writes its receive
// buffer's views straight into the host socket (hostWriter), without a
// buffer of ours.
func (r *tcpRelay) up() {
	entry, ch := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	r.wq.EventRegister(&entry)
	defer r.wq.EventUnregister(&entry)
	w := hostWriter{rc: r.rc}
	p := r.s.st.Poller()
	ready := func() bool {
		select {
		case <-r.done:
			return true
		default:
		}
		return r.ep.Readiness(waiter.ReadableEvents|waiter.EventHUp|waiter.EventErr) != 0
	}
	for {
		w.full, w.err = false, nil
		res, terr := r.ep.Read(&w, tcpip.ReadOptions{})
		r.s.c.tcpUp.Add(uint64(res.Count))
		switch terr.(type) {
		case nil, *tcpip.ErrBadBuffer:
			// ErrBadBuffer: the host socket took nothing (full or failed).
			if w.err != nil {
				r.abort(true)
				return
			}
			if w.full && !r.waitHost() {
				return
			}
		case *tcpip.ErrWouldBlock:
			// With busy polling on, spin on the links for the next
			// segment before parking (a request/response flow saves
			// two goroutine wake-ups per exchange).
			if p.Wait(ready) {
				continue
			}
			select {
			case <-ch:
			case <-r.done:
				return
			}
		case *tcpip.ErrClosedForReceive:
			// The sandbox sent FIN: pass the half-close on.
			r.host.CloseWrite()
			return
		default:
			// Reset by the sandbox, or aborted.
			r.abort(true)
			return
		}
	}
}

// down copies from the host to the sandbox: gVisor reads the host socket
// straight into its send buffer (hostReader).
func (r *tcpRelay) down() {
	entry, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	r.wq.EventRegister(&entry)
	defer r.wq.EventUnregister(&entry)
	rd := hostReader{rc: r.rc}
	for {
		avail, eof, err := r.waitReadable()
		switch {
		case err != nil && isReset(err):
			r.abort(true)
			return
		case err != nil:
			// Closed by abort, or a host error: end both sides.
			r.abort(false)
			return
		case eof:
			r.ep.Shutdown(tcpip.ShutdownWrite)
			return
		}
		for avail > 0 {
			rd.n, rd.err = avail, nil
			n, terr := r.ep.Write(&rd, tcpip.WriteOptions{})
			avail -= int(n)
			r.s.c.tcpDown.Add(uint64(n))
			switch terr.(type) {
			case nil:
				if rd.err != nil {
					r.abort(isReset(rd.err))
					return
				}
			case *tcpip.ErrWouldBlock:
				select {
				case <-ch:
				case <-r.done:
					return
				}
			case *tcpip.ErrConnectionReset:
				r.abort(true)
				return
			default:
				// The sandbox closed for good (or we aborted): the
				// host must not think its data arrived.
				r.abort(true)
				return
			}
		}
	}
}

// waitReadable parks until the host socket has data, its peer's FIN or an
// error, and reports how many bytes can be read at once.
func (r *tcpRelay) waitReadable() (avail int, eof bool, err error) {
	var herr error
	werr := r.rc.Read(func(fd uintptr) bool {
		// The readiness check happens inside the callback, after the
		// poller was armed, so an arrival in between is never missed.
		n, e := unix.IoctlGetInt(int(fd), sioCINQ)
		if e == nil && n > 0 {
			avail = n
			return true
		}
		var b [1]byte
		m, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
			return false
		case e != nil:
			herr = e
		case m == 0:
			eof = true
		default:
			avail = 1
		}
		return true
	})
	if werr != nil {
		return 0, false, werr
	}
	return avail, eof, herr
}

// waitHost parks until the host socket is writable; false means the relay
// is over.
func (r *tcpRelay) waitHost() bool {
	err := r.rc.Write(func(fd uintptr) bool {
		// poll(2) checks the level after the poller was re-armed.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	if err != nil {
		r.abort(false)
		return false
	}
	return true
}

// hostWriter writes to the host socket without blocking: gVisor calls it
// with its endpoint locked, which must not wait for the host.
type hostWriter struct {
	rc   syscall.RawConn
	full bool  // the socket's buffer filled up
	err  error // the socket failed
}

var errWouldBlock = errors.New("host socket buffer full")

// Write implements io.Writer: it writes what the socket takes now and
// reports errWouldBlock (with full set) for the rest.
func (w *hostWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		var n int
		var e error
		if err := w.rc.Write(func(fd uintptr) bool {
			n, e = unix.Write(int(fd), p[done:])
			return true
		}); err != nil {
			w.err = err
			return done, err
		}
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			w.full = true
			return done, errWouldBlock
		case e != nil:
			w.err = e
			return done, e
		}
		done += n
	}
	return done, nil
}

// hostReader is a tcpip.Payloader that reads exactly n bytes from the host
// socket, which the socket already holds (SIOCINQ): gVisor's endpoint
// reads it straight into its send buffer. gVisor keeps reading until it
// has the count it asked for, so a short read is reported as an error.
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
		if err := r.rc.Read(func(fd uintptr) bool {
			n, e = unix.Read(int(fd), p[done:])
			return true
		}); err != nil {
			r.err = err
			return done, err
		}
		switch {
		case e == unix.EINTR:
			continue
		case e != nil:
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

// addrOf converts a gVisor address.
func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}
