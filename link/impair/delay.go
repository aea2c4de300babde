package impair

import (
	"math/rand/v2"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
)

// DelayLimit is the most packets the delay line holds, both directions
// together: netem's default limit (1000 packets). A packet delayed beyond
// it is dropped and counted in Drops.Limit, as netem drops past its limit.
const DelayLimit = 1000

// nextDue draws the due time of the next delayed packet in one direction:
// now plus the delay plus up to the jitter, but never before *last, which
// it advances. The caller holds the direction's lock.
func nextDue(im *link.Impairments, r *rand.Rand, last *time.Time) time.Time {
	d := im.Delay
	if im.Jitter > 0 {
		d += time.Duration(r.Int64N(int64(im.Jitter)))
	}
	due := time.Now().Add(d)
	if due.Before(*last) {
		due = *last
	}
	*last = due
	return due
}

// delayedPacket is a packet waiting in the delay line.
type delayedPacket struct {
	rx    bool
	proto tcpip.NetworkProtocolNumber
	pkt   *stack.PacketBuffer // the line's reference
	due   time.Time
}

// delayLine holds delayed packets and releases them in due order from one
// goroutine, started by Wrap and joined by Endpoint.Close.
type delayLine struct {
	e      *Endpoint
	mu     sync.Mutex
	queue  []delayedPacket // sorted by due time; equal ones in arrival order
	closed bool
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

func newDelayLine(e *Endpoint) *delayLine {
	l := &delayLine{e: e, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

// add queues p to leave at due, taking over p's reference. A packet due
// no earlier than those queued goes behind them all.
func (l *delayLine) add(due time.Time, p delayedPacket) {
	p.due = due
	c := &l.e.tx
	if p.rx {
		c = &l.e.rx
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		p.pkt.DecRef()
		c.closed.Add(1)
		return
	case len(l.queue) >= DelayLimit:
		l.mu.Unlock()
		p.pkt.DecRef()
		c.limit.Add(1)
		return
	}
	c.delayed.Add(1)
	i := len(l.queue)
	for i > 0 && l.queue[i-1].due.After(p.due) {
		i--
	}
	l.queue = append(l.queue, delayedPacket{})
	copy(l.queue[i+1:], l.queue[i:])
	l.queue[i] = p
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// loop releases packets when due: received ones to the stack, sent ones to
// the wrapped endpoint, in one write per round.
func (l *delayLine) loop() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var ready []delayedPacket
	for {
		l.mu.Lock()
		now := time.Now()
		n := 0
		for n < len(l.queue) && !l.queue[n].due.After(now) {
			n++
		}
		ready = append(ready[:0], l.queue[:n]...)
		l.queue = append(l.queue[:0], l.queue[n:]...)
		wait := time.Hour
		if len(l.queue) > 0 {
			wait = l.queue[0].due.Sub(now)
		}
		l.mu.Unlock()
		l.release(ready)
		clear(ready)
		timer.Reset(wait)
		select {
		case <-l.stop:
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// release delivers or writes the due packets and drops the line's
// references, counting any the wrapped endpoint refused.
func (l *delayLine) release(ready []delayedPacket) {
	e := l.e
	var out stack.PacketBufferList
	for _, p := range ready {
		if !p.rx {
			out.PushBack(p.pkt)
			continue
		}
		if d := e.upper(); d != nil {
			d.DeliverNetworkPacket(p.proto, p.pkt)
		} else {
			e.rx.detached.Add(1)
		}
	}
	if out.Len() > 0 {
		n, err := e.LinkEndpoint.WritePackets(out)
		if rest := uint64(out.Len() - n); rest > 0 {
			switch err.(type) {
			case *tcpip.ErrNoBufferSpace, *tcpip.ErrWouldBlock:
				e.tx.full.Add(rest)
			case *tcpip.ErrClosedForSend:
				e.tx.closed.Add(rest)
			default:
				e.tx.failed.Add(rest)
			}
		}
	}
	for _, p := range ready {
		p.pkt.DecRef()
	}
}

// close stops the goroutine, waits for it, and releases what is queued,
// counting it in each direction's Drops.Closed.
func (l *delayLine) close() {
	l.mu.Lock()
	l.closed = true
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	for _, p := range q {
		p.pkt.DecRef()
		if p.rx {
			l.e.rx.closed.Add(1)
		} else {
			l.e.tx.closed.Add(1)
		}
	}
}
