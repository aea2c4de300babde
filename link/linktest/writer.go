package linktest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// WritableDelay is how long after a refused write a NotifyingWriter calls
// the writability callback: soon, but from another goroutine and after the
// refused write has returned, as a device's completion interrupt would.
const WritableDelay = 20 * time.Microsecond

// Writer is a stack.LinkWriter that takes what a test tells it to, records
// it, and checks that writes never overlap (a discipline promises one
// writer at a time). Set the fields before the first write; the zero value
// takes everything. It is safe for concurrent use.
type Writer struct {
	// Take, if set, says how many of a batch of n to take, from 0 to n; the
	// rest are refused with ErrNoBufferSpace. It runs outside the Writer's
	// lock, so it may block to hold a write in progress. nil takes all.
	Take func(n int) int
	// Fail, if set, fails every write with it, taking nothing, as a closed
	// or broken device does.
	Fail tcpip.Error
	// Delay is slept at the start of every write, standing for a device
	// that takes time, so that queues and batches build up behind it.
	Delay time.Duration
	// Check, if set, is called with each packet taken, in order, under the
	// Writer's lock; a non-empty result is recorded as a problem.
	Check func(pkt *stack.PacketBuffer) string
	// Keep records a copy of the bytes of every packet taken (Written).
	Keep bool

	inWrite  atomic.Int32
	mu       sync.Mutex
	calls    int
	taken    int
	refused  int
	problems []string
	kept     [][]byte
	notify   func()
}

// WritePackets implements stack.LinkWriter. The caller keeps its
// references and the list: the Writer records copies, never references.
func (w *Writer) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if w.inWrite.Add(1) != 1 {
		w.problem("two goroutines in WritePackets at once")
	}
	defer w.inWrite.Add(-1)
	if w.Delay > 0 {
		time.Sleep(w.Delay)
	}
	list := pkts.AsSlice()
	take := len(list)
	if w.Fail != nil {
		take = 0
	} else if w.Take != nil {
		take = w.Take(len(list))
		if take < 0 || take > len(list) {
			panic(fmt.Sprintf("linktest: Writer.Take(%d) = %d: must be from 0 to %d", len(list), take, len(list)))
		}
	}
	w.mu.Lock()
	w.calls++
	w.taken += take
	w.refused += len(list) - take
	for _, p := range list[:take] {
		if w.Check != nil {
			if msg := w.Check(p); msg != "" {
				w.problems = append(w.problems, msg)
			}
		}
		if w.Keep {
			b := p.ToBuffer()
			w.kept = append(w.kept, b.Flatten())
			b.Release()
		}
	}
	notify := w.notify
	w.mu.Unlock()
	switch {
	case w.Fail != nil:
		return 0, w.Fail
	case take < len(list):
		if notify != nil {
			time.AfterFunc(WritableDelay, notify)
		}
		return take, &tcpip.ErrNoBufferSpace{}
	}
	return take, nil
}

func (w *Writer) problem(msg string) {
	w.mu.Lock()
	w.problems = append(w.problems, msg)
	w.mu.Unlock()
}

// Calls returns how many WritePackets calls there were.
func (w *Writer) Calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// Taken returns how many packets the Writer took.
func (w *Writer) Taken() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.taken
}

// Refused returns how many packets the Writer refused or failed.
func (w *Writer) Refused() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

// Problems returns what went wrong: overlapping writes and what Check
// reported. A test expects it empty.
func (w *Writer) Problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.problems...)
}

// Written returns copies of the packets taken, in order (with Keep).
func (w *Writer) Written() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.kept...)
}

// NotifyingWriter is a Writer that signals writability
// (sched.WritableNotifier): WritableDelay after each write it refused, it
// calls the registered callback.
type NotifyingWriter struct{ *Writer }

// NotifyWritable implements sched.WritableNotifier.
func (n NotifyingWriter) NotifyWritable(f func()) {
	n.mu.Lock()
	n.notify = f
	n.mu.Unlock()
}
