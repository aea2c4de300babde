package pcap

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// queue is the capture's bounded buffer of records and the goroutine that
// drains it into the writer. The data path only copies a record in under
// a mutex; the goroutine swaps the filled buffer for an empty one and
// writes it, a batch per Write, so the data path never waits for the
// writer, and at most twice the buffer size is held (one buffer filling,
// one being written).
type queue struct {
	w    io.Writer
	snap int

	mu     sync.Mutex
	fill   []byte // records not yet handed to the writer; never grows past its capacity
	n      int    // records in fill
	trunc  int    // of them, cut to the snap length
	closed bool   // Close began: nothing more is taken
	failed bool   // the writer failed: nothing more is taken

	wake chan struct{} // a record went into an empty fill; capacity 1
	stop chan struct{} // closed by close
	done chan struct{} // closed when the goroutine returns

	packets, bytes, truncated, dropped, lost atomic.Uint64
	err                                      atomic.Pointer[error]
}

// newQueue starts the goroutine that writes header, then every batch of
// records, to w. close joins it.
func newQueue(w io.Writer, header []byte, snap, size int) *queue {
	q := &queue{
		w:    w,
		snap: snap,
		fill: make([]byte, 0, size),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go q.writeLoop(header, size)
	return q
}

// capture copies a record of each packet of pkts, captured at ts, into
// the buffer, under one lock for the batch, or counts it as dropped (no
// room, or closing) or lost (the writer failed). It never blocks on the
// writer, and allocates nothing. The caller keeps its references.
func (q *queue) capture(ts time.Time, pkts ...*stack.PacketBuffer) {
	var dropped, lost uint64
	q.mu.Lock()
	first := q.n == 0
	for _, pkt := range pkts {
		orig := pkt.Size()
		incl := min(orig, q.snap)
		switch {
		case q.failed:
			lost++
			continue
		case q.closed || len(q.fill)+recordHeaderLen+incl > cap(q.fill):
			dropped++
			continue
		}
		q.fill = appendRecordHeader(q.fill, ts, incl, orig)
		q.fill = appendPacket(q.fill, pkt, incl)
		q.n++
		if incl < orig {
			q.trunc++
		}
	}
	first = first && q.n > 0
	q.mu.Unlock()
	if dropped > 0 {
		q.dropped.Add(dropped)
	}
	if lost > 0 {
		q.lost.Add(lost)
	}
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// appendPacket appends the first n bytes of pkt, from its outermost
// header on, straight from the buffer's views (pkt.AsSlices would
// allocate).
func appendPacket(b []byte, pkt *stack.PacketBuffer, n int) []byte {
	views, off := pkt.AsViewList()
	for v := views.Front(); v != nil && n > 0; v = v.Next() {
		s := v.AsSlice()
		if off >= len(s) {
			off -= len(s)
			continue
		}
		s = s[off:]
		off = 0
		if len(s) > n {
			s = s[:n]
		}
		b = append(b, s...)
		n -= len(s)
	}
	return b
}

// writeLoop writes the file header, then each batch of records as the
// data path signals them, and at close what is left, and flushes.
func (q *queue) writeLoop(header []byte, size int) {
	defer close(q.done)
	q.write(header, 0, 0)
	spare := make([]byte, 0, size)
	for {
		select {
		case <-q.wake:
		case <-q.stop:
		}
		q.mu.Lock()
		batch, n, trunc, closed := q.fill, q.n, q.trunc, q.closed
		q.fill, q.n, q.trunc = spare[:0], 0, 0
		q.mu.Unlock()
		if len(batch) > 0 {
			q.write(batch, n, trunc)
		}
		spare = batch
		if closed {
			if f, ok := q.w.(interface{ Flush() error }); ok && q.err.Load() == nil {
				if err := f.Flush(); err != nil {
					q.fail(err)
				}
			}
			return
		}
	}
}

// write hands b, which holds n records (trunc of them cut short), to the
// writer, and counts them: as written, or as lost if the writer failed
// now or before.
func (q *queue) write(b []byte, n, trunc int) {
	if q.err.Load() != nil {
		q.lost.Add(uint64(n))
		return
	}
	if _, err := q.w.Write(b); err != nil {
		q.fail(err)
		q.lost.Add(uint64(n))
		return
	}
	q.packets.Add(uint64(n))
	q.bytes.Add(uint64(len(b)))
	q.truncated.Add(uint64(trunc))
}

// fail records the writer's first error; the data path stops copying.
func (q *queue) fail(err error) {
	q.err.CompareAndSwap(nil, &err)
	q.mu.Lock()
	q.failed = true
	q.mu.Unlock()
}

// close takes no more records, lets the goroutine write what is buffered
// and flush, and waits for it. Only the first call does anything; the
// Endpoint's Lifecycle calls it once.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}
