package forward

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// hostPump carries one TCP flow between a gVisor endpoint and a host
// socket, each byte copied once per direction: gVisor writes its receive
// buffer's views straight into the host socket (hostWriter) and reads the
// host socket straight into its send buffer (hostReader).
type hostPump struct {
	c    *conn
	host *net.TCPConn
	rc   syscall.RawConn
	done chan struct{} // closed by abort
	once sync.Once
}

// hostSplice runs the pump until both directions have ended: the
// peer-to-host direction in a goroutine it starts and joins, the other in
// the caller's. false means the host socket has no raw conn (and nothing
// was done).
func hostSplice(c *conn, host *net.TCPConn) bool {
	rc, err := host.SyscallConn()
	if err != nil {
		return false
	}
	p := &hostPump{c: c, host: host, rc: rc, done: make(chan struct{})}
	if !c.fl.setAbort(c.ep, func() { p.abort(false) }) {
		p.finish()
		return true
	}
	up := make(chan struct{})
	go func() { defer close(up); p.up() }()
	p.down()
	<-up
	p.finish()
	return true
}

// finish releases both sides once the pumps are done.
func (p *hostPump) finish() {
	p.host.Close()
	p.c.Close()
}

// abort ends both directions at once; with reset the peers see resets
// (a reset from one side is carried to the other).
func (p *hostPump) abort(reset bool) {
	p.once.Do(func() {
		if reset {
			p.c.fl.f.c.tcpResets.Add(1)
		}
		p.host.SetLinger(0)
		p.c.ep.Abort()
		close(p.done)
		// Closing wakes a pump waiting on the host socket.
		p.host.Close()
	})
}

// up copies from the peer to the host.
func (p *hostPump) up() {
	ep, wq := p.c.ep, p.c.wq
	entry, ch := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	w := hostWriter{rc: p.rc}
	poller := p.c.fl.f.st.Poller()
	ready := func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		return ep.Readiness(waiter.ReadableEvents|waiter.EventHUp|waiter.EventErr) != 0
	}
	for {
		w.full, w.err = false, nil
		res, terr := ep.Read(&w, tcpip.ReadOptions{})
		p.c.countUp(res.Count)
		switch terr.(type) {
		case nil, *tcpip.ErrBadBuffer:
			// ErrBadBuffer: the host socket took nothing (full or failed).
			if w.err != nil {
				p.abort(true)
				return
			}
			if w.full && !p.waitHost() {
				return
			}
		case *tcpip.ErrWouldBlock:
			// With busy polling on, spin on the links for the next
			// segment before parking (a request/response flow saves
			// two goroutine wake-ups per exchange).
			if poller.Wait(ready) {
				continue
			}
			select {
			case <-ch:
			case <-p.done:
				return
			}
		case *tcpip.ErrClosedForReceive:
			// The peer sent FIN: pass the half-close on.
			p.host.CloseWrite()
			return
		default:
			// Reset by the peer, or aborted.
			p.abort(true)
			return
		}
	}
}

// down copies from the host to the peer.
func (p *hostPump) down() {
	ep, wq := p.c.ep, p.c.wq
	entry, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	rd := hostReader{rc: p.rc}
	for {
		avail, eof, err := p.waitReadable()
		switch {
		case err != nil && isReset(err):
			p.abort(true)
			return
		case err != nil:
			// Closed by abort, or a host error: end both sides.
			p.abort(false)
			return
		case eof:
			ep.Shutdown(tcpip.ShutdownWrite)
			return
		}
		for avail > 0 {
			rd.n, rd.err = avail, nil
			n, terr := ep.Write(&rd, tcpip.WriteOptions{})
			avail -= int(n)
			p.c.countDown(int(n))
			switch terr.(type) {
			case nil:
				if rd.err != nil {
					p.abort(isReset(rd.err))
					return
				}
			case *tcpip.ErrWouldBlock:
				select {
				case <-ch:
				case <-p.done:
					return
				}
			default:
				// Reset, or the peer closed for good (or we aborted):
				// the host must not think its data arrived.
				p.abort(true)
				return
			}
		}
	}
}

// waitReadable parks until the host socket has data, its peer's FIN or an
// error, and reports how many bytes can be read at once.
func (p *hostPump) waitReadable() (avail int, eof bool, err error) {
	var herr error
	werr := p.rc.Read(func(fd uintptr) bool {
		// The readiness check happens inside the callback, after the
		// poller was armed, so an arrival in between is never missed.
		n, e := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
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

// hostFlow relays one UDP flow through one host socket (full cone): the
// peer's datagrams are sent in the stack's receive path, without a queue
// or a goroutine hop; the host's are read, once their size is known,
// straight into the packet that carries them to the peer.
type hostFlow struct {
	r    *relay
	u    *UDPFlow
	conn *net.UDPConn
	rc   syscall.RawConn
	v6   bool // the socket is IPv6 (dual-stack)

	mu     sync.Mutex // guards the destination cache and viaDNS
	toAP   netip.AddrPort
	toSA   unix.Sockaddr
	viaDNS netip.Addr
}

// hostUDP serves u until it closes; false means no host socket could be
// had.
func hostUDP(r *relay, u *UDPFlow) bool {
	// One dual-stack socket serves either family of destination (an IPv6
	// peer socket may query an IPv4 resolver); fall back to IPv4 on a
	// host without IPv6.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil && u.src.Addr().Is4() {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	}
	if err != nil {
		return false
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return false
	}
	h := &hostFlow{r: r, u: u, conn: c, rc: rc}
	if la, ok := c.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() == nil {
		h.v6 = true
	}
	u.atClose(func() { c.Close() })
	for _, d := range u.setInline(h.send) {
		h.send(d.b, d.dst)
	}
	h.receiveLoop()
	return true
}

// send passes a datagram to the host without blocking; a full socket
// buffer drops it (counted), as a full device queue would.
func (h *hostFlow) send(b []byte, dst netip.AddrPort) bool {
	f := h.u.f
	to, dns, reason, ok := h.r.pol.target(dst)
	if !ok {
		f.refuse(reason)
		return false
	}
	h.mu.Lock()
	if dns.IsValid() {
		h.viaDNS = dns
		f.c.dns.Add(1)
	}
	if h.toAP != to || h.toSA == nil {
		h.toAP, h.toSA = to, h.sockaddr(to)
	}
	sa := h.toSA
	h.mu.Unlock()
	var e error
	if err := h.rc.Write(func(fd uintptr) bool {
		e = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		return true
	}); err != nil {
		e = err
	}
	switch {
	case e == nil:
		return true
	case errors.Is(e, unix.EAGAIN) || errors.Is(e, unix.ENOBUFS):
		f.c.udpDropped.Add(1)
	default:
		f.refuse(HostError)
	}
	return false
}

// sockaddr is to in the form the socket's family takes.
func (h *hostFlow) sockaddr(to netip.AddrPort) unix.Sockaddr {
	if h.v6 {
		return &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	return &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().Unmap().As4()}
}

// receiveLoop relays datagrams from the host to the peer until the flow
// closes (which closes the socket).
func (h *hostFlow) receiveLoop() {
	for {
		err := h.rc.Read(func(fd uintptr) bool {
			// Drain the socket: the poller reports it readable once per
			// arrival, not while data is queued. An error (an ICMP error
			// the kernel reports once, EINTR) is retried, since a datagram
			// may still wait behind it; a few in a row mean give up until
			// the next arrival.
			for errs := 0; errs < 8; {
				switch h.receiveOne(int(fd)) {
				case received:
					errs = 0
				case empty:
					return false
				default:
					errs++
				}
			}
			return false
		})
		if err != nil {
			return // closed
		}
	}
}

// What receiveOne found.
type recvResult int

const (
	received  recvResult = iota // a datagram, passed on or counted as refused
	empty                       // nothing to read
	recvError                   // an error instead of a datagram
)

// receiveOne moves one datagram from the host socket to the peer.
func (h *hostFlow) receiveOne(fd int) recvResult {
	u, f := h.u, h.u.f
	// Peek at the next datagram's length first (MSG_TRUNC reports it
	// whole), so it lands in a packet of its size; SIOCINQ would race
	// with a datagram arriving between the two calls.
	n, _, err := unix.Recvfrom(fd, nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return empty
	}
	if err != nil {
		return recvError
	}
	hlen := udpHeaderLen(u.src)
	v := buffer.NewViewSize(hlen + n)
	m, from, err := unix.Recvfrom(fd, v.AsSlice()[hlen:], unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	if err != nil {
		v.Release()
		return recvError
	}
	u.touch()
	h.mu.Lock()
	via := h.viaDNS
	h.mu.Unlock()
	src, reason, ok := h.r.pol.source(fromSockaddr(from), via, u.src.Addr().Is6())
	switch {
	case !ok:
		f.refuse(reason)
	case m > n:
		// Truncated: cannot happen, we are the socket's only reader.
		f.c.udpDropped.Add(1)
	case src.Addr().Is4() != u.src.Addr().Is4():
		f.refuse(Denied)
	default:
		u.writeView(v, src, m) // takes v; counts a drop itself
		return received
	}
	v.Release()
	return received
}

// fromSockaddr converts a sender's address.
func fromSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}
