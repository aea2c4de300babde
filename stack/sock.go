package stack

import (
	"bytes"
	"net"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/internal/deadline"
	"github.com/ustack-dev/ustack/poll"
)

// sock is what every conn of the stack is built on: its TCP conns, UDP
// and ping sockets and TCP listeners. It drives a gVisor endpoint itself,
// as gVisor's gonet adapters do, with one deadline per direction
// (internal/deadline), so that a conn has one deadline to set and one
// place that waits: a call tries the endpoint's non-blocking operation
// and, while that would block, waits for the endpoint's event, its
// deadline or Close, then tries again.
//
// With busy polling on, a read that finds nothing busy polls the stack's
// links (poll.Poller.Wait) before it waits. With the cache on
// (Options.Cache), the sock keeps what gonet allocates on every call (a
// slice writer for the endpoint to copy into, a reader over the caller's
// bytes, a destination address, the waiter entry of a wait), so that a
// read that finds data, a write that finds room, and a lone wait allocate
// nothing in our layer; with it off, each call allocates its own, as
// gonet's do. The kept scratch is never kept holding the caller's bytes.
//
// A sock is safe for concurrent use; it must not be copied.
type sock struct {
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	network string // the conn's network, for its errors: "tcp", "udp", "ip4:icmp"...

	// rd and wd are the read and write deadlines (a listener's Accept
	// waits on rd).
	rd, wd    deadline.Deadline
	done      chan struct{} // closed by close
	closeOnce sync.Once

	poller *poll.Poller // busy polling; nil when off
	ready  func() bool  // s.readable, bound once so a busy poll allocates nothing
	cached bool         // Options.Cache: keep the scratch below

	// The read and write scratch, each used by one call at a time: a
	// call that finds it in use (TryLock) allocates its own rather than
	// wait, as the endpoint's Write may take long (it runs the NIC's
	// qdisc, which may be held up by its link).
	rmu sync.Mutex // guards w
	w   tcpip.SliceWriter
	wmu sync.Mutex // guards ws
	ws  writeScratch

	rwait, wwait waitSlot // the kept waiter entries of reads and writes
}

// init readies a sock over ep, whose events wq signals: the conns embed
// a sock by value and call init in their constructors.
func (s *sock) init(network string, ep tcpip.Endpoint, wq *waiter.Queue, p *poll.Poller, cached bool) {
	s.network, s.ep, s.wq, s.cached = network, ep, wq, cached
	s.done = make(chan struct{})
	if p.Enabled() {
		s.poller = p
		s.ready = s.readable
	}
}

// isClosed reports whether close was called, without taking a lock.
func (s *sock) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// check fails an operation before it starts on a closed sock or a passed
// deadline d, as Go's sockets do even when data is waiting.
func (s *sock) check(d *deadline.Deadline) error {
	if s.isClosed() {
		return net.ErrClosed
	}
	if d.Passed() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// fail translates the endpoint's error of a failed operation: net.ErrClosed
// once the sock is closed (the endpoint's own error then only says so in
// gVisor's words), else TranslateError's.
func (s *sock) fail(terr tcpip.Error) error {
	if s.isClosed() {
		return net.ErrClosed
	}
	return TranslateError(terr)
}

// readable reports whether a read would not block: data, EOF or an error
// is waiting, or the sock was closed (so Close ends a busy poll).
func (s *sock) readable() bool {
	return s.isClosed() || s.ep.Readiness(waiter.ReadableEvents) != 0
}

// read reads into b, waiting for data until the read deadline or Close.
// Errors are TranslateError's (io.EOF once the peer closed),
// os.ErrDeadlineExceeded or net.ErrClosed.
func (s *sock) read(b []byte, opts tcpip.ReadOptions) (tcpip.ReadResult, error) {
	if err := s.check(&s.rd); err != nil {
		return tcpip.ReadResult{}, err
	}
	if s.poller != nil && !s.readable() {
		s.poller.Wait(s.ready)
	}
	var w waitReg
	defer s.unregister(&w)
	var own *tcpip.SliceWriter // this call's writer, if it cannot use the kept one
	for {
		res, terr := s.readOnce(b, opts, &own)
		switch terr.(type) {
		case nil:
			return res, nil
		case *tcpip.ErrWouldBlock:
		default:
			return res, s.fail(terr)
		}
		if err := s.wait(&w, &s.rwait, waiter.ReadableEvents, &s.rd); err != nil {
			return tcpip.ReadResult{}, err
		}
	}
}

// readOnce is one non-blocking read of the endpoint into b, with the
// kept scratch if it is free, else with *own, which it makes on the
// call's first try and keeps for its retries.
func (s *sock) readOnce(b []byte, opts tcpip.ReadOptions, own **tcpip.SliceWriter) (tcpip.ReadResult, tcpip.Error) {
	if !s.cached || !s.rmu.TryLock() {
		if *own == nil {
			*own = new(tcpip.SliceWriter)
		}
		**own = b
		res, terr := s.ep.Read(*own, opts)
		**own = nil
		return res, terr
	}
	s.w = b
	res, terr := s.ep.Read(&s.w, opts)
	s.w = nil
	s.rmu.Unlock()
	return res, terr
}

// write writes b (to *to, if to is not nil), waiting for room until the
// write deadline or Close: for a stream all of b, in as many of the
// endpoint's writes as it takes; for datagrams, one write. It returns how
// much the endpoint took; errors are read's.
func (s *sock) write(b []byte, to *tcpip.FullAddress, stream bool) (int, error) {
	if err := s.check(&s.wd); err != nil {
		return 0, err
	}
	if stream && len(b) == 0 {
		return 0, nil
	}
	var w waitReg
	defer s.unregister(&w)
	var own *writeScratch // this call's scratch, if it cannot use the kept one
	n := 0
	for {
		m, terr := s.writeOnce(b[n:], to, &own)
		n += m
		switch terr.(type) {
		case nil:
			if !stream || n == len(b) {
				return n, nil
			}
			continue // the endpoint took part: offer it the rest at once
		case *tcpip.ErrWouldBlock:
		default:
			return n, s.fail(terr)
		}
		if err := s.wait(&w, &s.wwait, waiter.WritableEvents, &s.wd); err != nil {
			return n, err
		}
	}
}

// writeOnce is one non-blocking write of b to the endpoint (to *to, if
// to is not nil), with the kept scratch if it is free, else with *own,
// which it makes on the call's first try and keeps for its retries.
func (s *sock) writeOnce(b []byte, to *tcpip.FullAddress, own **writeScratch) (int, tcpip.Error) {
	ws, kept := &s.ws, s.cached && s.wmu.TryLock()
	if !kept {
		if *own == nil {
			*own = new(writeScratch)
		}
		ws = *own
	}
	ws.r.Reset(b)
	var opts tcpip.WriteOptions
	if to != nil {
		ws.to = *to
		opts.To = &ws.to
	}
	n, terr := s.ep.Write(&ws.r, opts)
	ws.r.Reset(nil)
	ws.to = tcpip.FullAddress{}
	if kept {
		s.wmu.Unlock()
	}
	return int(n), terr
}

// writeScratch is what a write hands the endpoint: a reader over the
// caller's bytes and the destination.
type writeScratch struct {
	r  bytes.Reader
	to tcpip.FullAddress
}

// waitSlot is a sock's kept waiter entry for one direction: the call that
// finds it free waits with it, so that a wait allocates nothing; a
// concurrent call makes an entry of its own.
type waitSlot struct {
	mu    sync.Mutex // held by the call that waits with entry
	entry waiter.Entry
	ready chan struct{} // entry's channel
}

// waitReg is one call's registration on the sock's waiter queue; the
// zero value is not registered.
type waitReg struct {
	slot  *waitSlot     // the slot this call holds; nil if it made its own entry
	entry *waiter.Entry // registered on the queue
	ready <-chan struct{}
}

// wait waits for one of mask's events on the endpoint, the deadline d or
// Close. Its first call for w only registers w and returns nil: the
// caller tries its operation again before it waits, so an event between
// its last try and the registration is not missed. The caller
// unregisters w when it is done (unregister).
func (s *sock) wait(w *waitReg, slot *waitSlot, mask waiter.EventMask, d *deadline.Deadline) error {
	if w.entry == nil {
		if s.cached && slot.mu.TryLock() {
			if slot.ready == nil {
				slot.entry, slot.ready = waiter.NewChannelEntry(mask)
			}
			w.slot, w.entry, w.ready = slot, &slot.entry, slot.ready
		} else {
			e, ready := waiter.NewChannelEntry(mask)
			w.entry, w.ready = &e, ready
		}
		s.wq.EventRegister(w.entry)
		return nil
	}
	select {
	case <-w.ready:
		return nil
	case <-d.Done():
		return os.ErrDeadlineExceeded
	case <-s.done:
		return net.ErrClosed
	}
}

// unregister takes w off the waiter queue, if wait registered it, and
// frees the slot it held.
func (s *sock) unregister(w *waitReg) {
	if w.entry == nil {
		return
	}
	s.wq.EventUnregister(w.entry)
	if w.slot != nil {
		// An event that came after the last wait must not wake the
		// slot's next user at once.
		select {
		case <-w.slot.ready:
		default:
		}
		w.slot.mu.Unlock()
	}
}

// close wakes every call in progress, stops the deadlines' timers and
// closes the endpoint, once.
func (s *sock) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.rd.Stop()
		s.wd.Stop()
		s.ep.Close()
	})
}

// SetDeadline implements net.Conn: it sets the read and the write
// deadline.
func (s *sock) SetDeadline(t time.Time) error { return s.setDeadline(t, true, true) }

// SetReadDeadline implements net.Conn.
func (s *sock) SetReadDeadline(t time.Time) error { return s.setDeadline(t, true, false) }

// SetWriteDeadline implements net.Conn.
func (s *sock) SetWriteDeadline(t time.Time) error { return s.setDeadline(t, false, true) }

// setDeadline sets the read deadline, the write deadline or both. On a
// closed sock it fails, as Go's sockets do, rather than start a timer
// nobody stops.
func (s *sock) setDeadline(t time.Time, read, write bool) error {
	if s.isClosed() {
		return &net.OpError{Op: "set", Net: s.network, Err: net.ErrClosed}
	}
	if read {
		s.rd.Set(t)
	}
	if write {
		s.wd.Set(t)
	}
	return nil
}
