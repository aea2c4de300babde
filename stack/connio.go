package stack

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/poll"
)

// The conns below are what the stack hands out when busy polling or the
// buffer cache is on: gonet's conns with a Read that, finding nothing to
// read, busy polls the stack's links (poll.Poller.Wait) before gonet
// parks it, and, with the cache on, Read and Write fast paths that use
// the conn's own scratch (connIO) where gonet allocates per call. With
// both off the stack hands out gonet's conns unchanged.

// readGate is the busy-polling part shared by the TCP and UDP conns.
type readGate struct {
	ep     tcpip.Endpoint
	p      *poll.Poller
	closed atomic.Bool
	ready  func() bool // c.readable, bound once so a wait allocates nothing
}

func newReadGate(ep tcpip.Endpoint, p *poll.Poller) *readGate {
	if !p.Enabled() {
		return nil
	}
	g := &readGate{ep: ep, p: p}
	g.ready = g.readable
	return g
}

// readable reports whether a read would not block: data, EOF or an error
// is waiting, or the conn was closed (so Close interrupts a spin).
func (g *readGate) readable() bool {
	return g.closed.Load() || g.ep.Readiness(waiter.ReadableEvents) != 0
}

// wait busy polls if a read of want bytes would block. A nil gate (busy
// polling off) does nothing.
func (g *readGate) wait(want int) {
	if g != nil && want > 0 && !g.readable() {
		g.p.Wait(g.ready)
	}
}

// close ends a busy poll in progress.
func (g *readGate) close() {
	if g != nil {
		g.closed.Store(true)
	}
}

// connIO is a conn's own read and write scratch: what gonet allocates on
// every call (a slice writer for the endpoint to copy into, a reader over
// the caller's bytes, a destination address) kept for the conn's life, so
// that a read that finds data, or a write that finds room, allocates
// nothing in our layer. Each half is used by one call at a time (a
// TryLock; a concurrent call takes gonet's path) and reset after use, so
// it never keeps the caller's bytes. A call with a deadline set takes the
// fast path only while the deadline is in the future; waiting is always
// gonet's.
type connIO struct {
	rmu sync.Mutex
	w   tcpip.SliceWriter
	// entry and ready wait for readability in readWait; ready is also
	// poked when a read deadline is set, so a waiting read hands over to
	// gonet, which keeps the deadlines.
	entry waiter.Entry
	ready chan struct{}
	wmu   sync.Mutex
	r     bytes.Reader
	to    tcpip.FullAddress
	// Read and write deadlines in Unix nanoseconds; 0 is none.
	rdl, wdl atomic.Int64
}

// newConnIO returns the scratch for a new conn, or nil if caching is off.
func newConnIO(on bool) *connIO {
	if !on {
		return nil
	}
	c := &connIO{}
	c.entry, c.ready = waiter.NewChannelEntry(waiter.ReadableEvents)
	return c
}

// due reports whether a deadline d (Unix nanoseconds, 0 none) allows the
// fast path.
func due(d int64) bool { return d != 0 && time.Now().UnixNano() >= d }

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// readWait reads into b, waiting for data as gonet does but with the
// conn's own wait entry. handled is false when the caller must take
// gonet's path instead: a read deadline is set, or another read is in
// progress. Otherwise res and err are the endpoint's (err is never
// ErrWouldBlock), and the caller translates err as gonet would: the
// endpoint reports an error once, so it must not be read again.
func (c *connIO) readWait(ep tcpip.Endpoint, wq *waiter.Queue, b []byte, opts tcpip.ReadOptions) (res tcpip.ReadResult, err tcpip.Error, handled bool) {
	if c == nil || c.rdl.Load() != 0 || !c.rmu.TryLock() {
		return tcpip.ReadResult{}, nil, false
	}
	defer c.rmu.Unlock()
	registered := false
	defer func() {
		if registered {
			wq.EventUnregister(&c.entry)
		}
	}()
	for {
		c.w = b
		res, err = ep.Read(&c.w, opts)
		c.w = nil
		if _, block := err.(*tcpip.ErrWouldBlock); !block {
			return res, err, true
		}
		if c.rdl.Load() != 0 {
			return tcpip.ReadResult{}, nil, false
		}
		if !registered {
			// Register, then read again: data that arrived in between
			// is not waited for.
			wq.EventRegister(&c.entry)
			registered = true
			continue
		}
		<-c.ready
	}
}

// wake wakes a readWait in progress, if c is not nil: after Close, which
// gVisor also signals, so that the wait never depends on that alone.
func (c *connIO) wake() {
	if c != nil {
		c.poke()
	}
}

// poke wakes a readWait in progress.
func (c *connIO) poke() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// write tries one non-blocking write of b (to *to, if not nil). It
// returns how much the endpoint took, and done: false when the caller is
// to write b[n:] through gonet, which waits (the write was not tried, the
// endpoint would block, or it took only part); true with err nil when all
// of b went, or with the endpoint's error (reported once, so the caller
// translates it rather than retry).
func (c *connIO) write(ep tcpip.Endpoint, b []byte, to *tcpip.FullAddress) (n int, err tcpip.Error, done bool) {
	if c == nil || len(b) == 0 || due(c.wdl.Load()) || !c.wmu.TryLock() {
		return 0, nil, false
	}
	c.r.Reset(b)
	opts := tcpip.WriteOptions{}
	if to != nil {
		c.to = *to
		opts.To = &c.to
	}
	m, err := ep.Write(&c.r, opts)
	c.r.Reset(nil)
	c.to = tcpip.FullAddress{}
	c.wmu.Unlock()
	switch err.(type) {
	case nil:
		return int(m), nil, int(m) == len(b)
	case *tcpip.ErrWouldBlock:
		return int(m), nil, false
	}
	return int(m), err, true
}

// connError builds the error gonet would for a failed call, translated
// as netError does: io.EOF for a read after the peer closed, otherwise a
// *net.OpError with its local address as the source and remote as the
// address.
func connError(op, network string, err tcpip.Error, local, remote net.Addr) error {
	if _, eof := err.(*tcpip.ErrClosedForReceive); eof && op == "read" {
		return io.EOF
	}
	return &net.OpError{Op: op, Net: network, Source: local, Addr: remote, Err: TranslateError(err)}
}

func (c *connIO) setDeadlines(t time.Time, read, write bool) {
	if c == nil {
		return
	}
	if read {
		c.rdl.Store(deadlineNanos(t))
		c.poke()
	}
	if write {
		c.wdl.Store(deadlineNanos(t))
	}
}

// Close implements net.Conn; it also ends a busy poll in progress.
