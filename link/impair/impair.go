// Package impair wraps any link endpoint and injects faults, seeded so that
// a run can be repeated: loss, duplication, reordering, corruption and
// delay on what the endpoint receives, and loss, duplication, reordering
// and delay on what it sends. This kernel has no netem; fault injection
// lives in our own link layer.
//
// Corruption applies to received packets only: it flips one bit of a
// private copy. If the wrapped endpoint tells the stack that checksums were
// verified (RX checksum offload), nobody would catch the flipped bit, so the
// wrapper drops the packet instead, as a NIC drops a frame whose FCS fails,
// and counts it.
package impair

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
)

// Options says what to inject in each direction.
type Options struct {
	// RX impairs packets the endpoint receives.
	RX link.Impairments
	// TX impairs packets the endpoint sends; Corrupt must be 0.
	TX link.Impairments
}

// Counts are what the wrapper did, per direction.
type Counts struct {
	Lost, Duplicated, Reordered, Corrupted, CorruptDropped, Delayed uint64
}

// Endpoint is an impairing wrapper around a link endpoint. It is safe for
// concurrent use; its delay goroutine starts with it and is joined by
// Close. Optional interfaces of the wrapped endpoint (GSO, link counters,
// writability signals) are passed through.
type Endpoint struct {
	stack.LinkEndpoint
	opts Options

	rxMu, txMu  sync.Mutex // guard the random sources and held packets
	rxRand      *rand.Rand
	txRand      *rand.Rand
	rxHeld      *stack.PacketBuffer // a received packet held for reordering
	rxHeldProto tcpip.NetworkProtocolNumber
	txHeld      *stack.PacketBuffer // a sent packet held for reordering
	rxOffload   bool
	delays      *delayLine
	rx, tx      counts
	life        linkutil.Lifecycle
}

type counts struct {
	lost, duplicated, reordered, corrupted, corruptDropped, delayed atomic.Uint64
}

func (c *counts) snapshot() Counts {
	return Counts{c.lost.Load(), c.duplicated.Load(), c.reordered.Load(), c.corrupted.Load(), c.corruptDropped.Load(), c.delayed.Load()}
}

// notifying is an Endpoint over a link that signals writability; it
// passes NotifyWritable through. Wrap returns it only for such links, so
// that a qdisc never waits for a signal the link cannot give.
type notifying struct {
	*Endpoint
	n interface{ NotifyWritable(func()) }
}

// NotifyWritable passes the qdisc's callback to the wrapped link.
func (n *notifying) NotifyWritable(f func()) { n.n.NotifyWritable(f) }

// Wrap returns lower wrapped with the given impairments. The wrapper owns
// lower: closing the wrapper closes it.
func Wrap(lower stack.LinkEndpoint, opts Options) (stack.LinkEndpoint, error) {
	if lower == nil {
		return nil, errors.New("impair: nil link endpoint")
	}
	if err := opts.RX.Validate(); err != nil {
		return nil, err
	}
	if err := opts.TX.Validate(); err != nil {
		return nil, err
	}
	if opts.TX.Corrupt > 0 {
		return nil, errors.New("impair: corruption applies to received packets only (TX corrupt must be 0)")
	}
	e := &Endpoint{
		LinkEndpoint: lower,
		opts:         opts,
		rxRand:       rand.New(rand.NewPCG(opts.RX.Seed, 1)),
		txRand:       rand.New(rand.NewPCG(opts.TX.Seed, 2)),
		rxOffload:    lower.Capabilities()&stack.CapabilityRXChecksumOffload != 0,
	}
	e.delays = newDelayLine(e)
	if n, ok := lower.(interface{ NotifyWritable(func()) }); ok {
		return &notifying{Endpoint: e, n: n}, nil
	}
	return e, nil
}

// Counts returns what the wrapper did to received and to sent packets.
func (e *Endpoint) Counts() (rx, tx Counts) { return e.rx.snapshot(), e.tx.snapshot() }

// LinkStats implements link.Reporter: the wrapped endpoint's counters, if
// it keeps them, with the impairment counters filled in (both directions
// added together).
func (e *Endpoint) LinkStats() link.Stats {
	var s link.Stats
	if r, ok := e.LinkEndpoint.(link.Reporter); ok {
		s = r.LinkStats()
	}
	rx, tx := e.Counts()
	s.ImpairLost += rx.Lost + tx.Lost + rx.CorruptDropped
	s.ImpairDuplicated += rx.Duplicated + tx.Duplicated
	s.ImpairReordered += rx.Reordered + tx.Reordered
	s.ImpairCorrupted += rx.Corrupted + rx.CorruptDropped
	s.ImpairDelayed += rx.Delayed + tx.Delayed
	return s
}

// GSOMaxSize passes through the wrapped endpoint's GSO limit.
func (e *Endpoint) GSOMaxSize() uint32 {
	if g, ok := e.LinkEndpoint.(stack.GSOEndpoint); ok {
		return g.GSOMaxSize()
	}
	return 0
}

// SupportedGSO passes through the wrapped endpoint's GSO support.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if g, ok := e.LinkEndpoint.(stack.GSOEndpoint); ok {
		return g.SupportedGSO()
	}
	return stack.GSONotSupported
}

// Attach implements stack.LinkEndpoint: the wrapped endpoint delivers to
// the wrapper, which delivers what survives to d.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.life.AttachAndStart(d, func() {})
	if d == nil {
		e.LinkEndpoint.Attach(nil)
		return
	}
	e.LinkEndpoint.Attach(rxTap{e})
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool { return e.life.IsAttached() }

func (e *Endpoint) upper() stack.NetworkDispatcher { return e.life.Dispatcher() }

// SetOnCloseAction implements stack.LinkEndpoint. The action belongs to
// the wrapper (the NIC holds the wrapper, not the wrapped endpoint).
func (e *Endpoint) SetOnCloseAction(f func()) { e.life.SetOnCloseAction(f) }

// Close runs the on-close action (which removes the NIC), closes the
// wrapped endpoint, stops the delay goroutine and releases every packet
// held back or delayed. Idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.life.BeginClose(); !first {
		return
	}
	e.LinkEndpoint.Close()
	e.delays.close()
	e.rxMu.Lock()
	if e.rxHeld != nil {
		e.rxHeld.DecRef()
		e.rxHeld = nil
	}
	e.rxMu.Unlock()
	e.txMu.Lock()
	if e.txHeld != nil {
		e.txHeld.DecRef()
		e.txHeld = nil
	}
	e.txMu.Unlock()
}

// rxTap is the dispatcher the wrapped endpoint delivers to.
type rxTap struct{ e *Endpoint }

// DeliverLinkPacket passes link-level copies through untouched.
func (t rxTap) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if d := t.e.upper(); d != nil {
		d.DeliverLinkPacket(proto, pkt)
	}
}

// DeliverNetworkPacket applies the receive impairments. The caller keeps
// its reference to pkt; anything delivered later is a private copy.
func (t rxTap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	e := t.e
	im := &e.opts.RX
	d := e.upper()
	if d == nil {
		return
	}
	if !im.Active() {
		d.DeliverNetworkPacket(proto, pkt)
		return
	}
	e.rxMu.Lock()
	r := e.rxRand
	lose := im.Loss > 0 && r.Float64() < im.Loss
	corrupt := !lose && im.Corrupt > 0 && r.Float64() < im.Corrupt
	if corrupt && e.rxOffload {
		// The stack will not check: drop it, as a NIC drops a bad FCS.
		e.rxMu.Unlock()
		e.rx.corruptDropped.Add(1)
		return
	}
	bit := r.Uint64()
	dup := !lose && im.Duplicate > 0 && r.Float64() < im.Duplicate
	var hold, release *stack.PacketBuffer
	var releaseProto tcpip.NetworkProtocolNumber
	if !lose && im.Reorder > 0 && e.rxHeld == nil && r.Float64() < im.Reorder {
		hold = e.copyOf(pkt, corrupt, bit)
		e.rxHeld, e.rxHeldProto = hold, proto
	} else if !lose && e.rxHeld != nil {
		release, releaseProto = e.rxHeld, e.rxHeldProto
		e.rxHeld = nil
	}
	var delay time.Duration
	if im.Delay > 0 || im.Jitter > 0 {
		delay = im.Delay
		if im.Jitter > 0 {
			delay += time.Duration(r.Int64N(int64(im.Jitter)))
		}
	}
	e.rxMu.Unlock()

	switch {
	case lose:
		e.rx.lost.Add(1)
		return
	case hold != nil:
		e.rx.reordered.Add(1)
		return
	}
	copies := 1
	if dup {
		copies = 2
		e.rx.duplicated.Add(1)
	}
	for range copies {
		if corrupt || delay > 0 {
			c := e.copyOf(pkt, corrupt, bit)
			if corrupt {
				e.rx.corrupted.Add(1)
			}
			if delay > 0 {
				e.rx.delayed.Add(1)
				e.delays.add(delay, delayedPacket{rx: true, proto: proto, pkt: c})
				continue
			}
			d.DeliverNetworkPacket(proto, c)
			c.DecRef()
			continue
		}
		if copies == 2 {
			c := e.copyOf(pkt, false, 0)
			d.DeliverNetworkPacket(proto, c)
			c.DecRef()
			continue
		}
		d.DeliverNetworkPacket(proto, pkt)
	}
	if release != nil {
		d.DeliverNetworkPacket(releaseProto, release)
		release.DecRef()
	}
}

// copyOf returns a fresh inbound packet with pkt's bytes (a private copy,
// with bit number bit, modulo the packet's bits, flipped if corrupt), its
// link header parsed again.
func (e *Endpoint) copyOf(pkt *stack.PacketBuffer, corrupt bool, bit uint64) *stack.PacketBuffer {
	b := pkt.ToBuffer()
	var payload buffer.Buffer
	if corrupt {
		data := b.Flatten()
		b.Release()
		if len(data) > 0 {
			bit %= uint64(len(data) * 8)
			data[bit/8] ^= 1 << (bit % 8)
		}
		payload = buffer.MakeWithData(data)
	} else {
		payload = b
	}
	c := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
	e.LinkEndpoint.ParseHeader(c)
	return c
}

// WritePackets applies the send impairments and writes what survives. A
// lost or delayed packet counts as written: the wire took it. If the
// wrapped endpoint takes only part of the batch, the originals it did not
// fully take are returned as unsent.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	im := &e.opts.TX
	if !im.Active() {
		return e.LinkEndpoint.WritePackets(pkts)
	}
	list := pkts.AsSlice()
	var out stack.PacketBufferList
	// done[i] is how many entries of out must be written for original i
	// to count as sent.
	done := make([]int, len(list))
	var extra []*stack.PacketBuffer // references we took for out
	e.txMu.Lock()
	r := e.txRand
	for i, pkt := range list {
		switch {
		case im.Loss > 0 && r.Float64() < im.Loss:
			e.tx.lost.Add(1)
		case im.Delay > 0 || im.Jitter > 0:
			delay := im.Delay
			if im.Jitter > 0 {
				delay += time.Duration(r.Int64N(int64(im.Jitter)))
			}
			e.tx.delayed.Add(1)
			e.delays.add(delay, delayedPacket{pkt: pkt.IncRef()})
		case im.Reorder > 0 && e.txHeld == nil && r.Float64() < im.Reorder:
			e.txHeld = pkt.IncRef()
			e.tx.reordered.Add(1)
		default:
			out.PushBack(pkt)
			if im.Duplicate > 0 && r.Float64() < im.Duplicate {
				out.PushBack(pkt)
				e.tx.duplicated.Add(1)
			}
			if e.txHeld != nil {
				out.PushBack(e.txHeld)
				extra = append(extra, e.txHeld)
				e.txHeld = nil
			}
		}
		done[i] = out.Len()
	}
	e.txMu.Unlock()
	defer func() {
		for _, p := range extra {
			p.DecRef()
		}
	}()
	if out.Len() == 0 {
		return len(list), nil
	}
	n, err := e.LinkEndpoint.WritePackets(out)
	if n >= out.Len() {
		return len(list), nil
	}
	sent := 0
	for sent < len(list) && done[sent] <= n {
		sent++
	}
	return sent, err
}

// delayedPacket is a packet waiting in the delay line.
type delayedPacket struct {
	rx    bool
	proto tcpip.NetworkProtocolNumber
	pkt   *stack.PacketBuffer // the line's reference
	due   time.Time
}

// delayLine holds delayed packets and releases them in due order from one
// goroutine.
type delayLine struct {
	e      *Endpoint
	mu     sync.Mutex
	queue  []delayedPacket // sorted by due time
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

func newDelayLine(e *Endpoint) *delayLine {
	l := &delayLine{e: e, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *delayLine) add(d time.Duration, p delayedPacket) {
	p.due = time.Now().Add(d)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		p.pkt.DecRef()
		return
	}
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
// the wrapped endpoint.
func (l *delayLine) loop() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.mu.Lock()
		var ready []delayedPacket
		now := time.Now()
		for len(l.queue) > 0 && !l.queue[0].due.After(now) {
			ready = append(ready, l.queue[0])
			l.queue = l.queue[1:]
		}
		wait := time.Hour
		if len(l.queue) > 0 {
			wait = l.queue[0].due.Sub(now)
		}
		l.mu.Unlock()
		for _, p := range ready {
			l.release(p)
		}
		timer.Reset(wait)
		select {
		case <-l.stop:
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

func (l *delayLine) release(p delayedPacket) {
	defer p.pkt.DecRef()
	if p.rx {
		if d := l.e.upper(); d != nil {
			d.DeliverNetworkPacket(p.proto, p.pkt)
		}
		return
	}
	var one stack.PacketBufferList
	one.PushBack(p.pkt)
	l.e.LinkEndpoint.WritePackets(one)
}

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
	}
}
