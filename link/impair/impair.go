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

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

var (
	_ stack.LinkEndpoint     = (*Endpoint)(nil)
	_ stack.GSOEndpoint      = (*Endpoint)(nil)
	_ link.Reporter          = (*Endpoint)(nil)
	_ link.Coalescer         = (*Endpoint)(nil)
	_ poll.Source            = (*Endpoint)(nil)
	_ sched.WritableNotifier = (*Endpoint)(nil)
	_ cacheReporter          = (*Endpoint)(nil)
	_ errReporter            = (*Endpoint)(nil)
)

// cacheReporter is implemented by endpoints with buffer caches (afpacket,
// tun); the wrapper passes it through.
type cacheReporter interface{ CacheStats() cache.Stats }

// errReporter is implemented by endpoints that can fail for good (the
// device went away); the wrapper passes it through.
type errReporter interface{ Err() error }

// DelayLimit is the most packets the delay line holds, both directions
// together: netem's default limit (1000 packets). A packet delayed beyond
// it is dropped and counted in Drops.Limit, as netem drops past its limit.
const DelayLimit = 1000

// Options says what to inject in each direction.
type Options struct {
	// RX impairs packets the endpoint receives.
	RX link.Impairments
	// TX impairs packets the endpoint sends; Corrupt must be 0.
	TX link.Impairments
}

// OnReceive returns the Options that impair what one end of a two-ended
// link (a mem pair, say) receives, so that wrapping both ends gives each
// direction of the wire im's faults, as netem on both ends of a veth does.
// End 0 draws from im.Seed and end 1 from im.Seed+1, so the two directions
// do not draw the same sequence.
func OnReceive(im link.Impairments, end int) *Options {
	im.Seed += uint64(end)
	return &Options{RX: im}
}

// BothWays returns the Options that impair both directions at one
// endpoint (a device whose far end is the kernel's): im on what it
// receives, and im without corruption, which applies to received packets
// only, on what it sends. The directions draw different sequences.
func BothWays(im link.Impairments) *Options {
	tx := im
	tx.Corrupt = 0
	return &Options{RX: im, TX: tx}
}

// Counts are what the wrapper did, per direction.
type Counts struct {
	// Lost counts packets dropped on purpose; CorruptDropped those that
	// were to be corrupted on a link whose stack verifies no checksums.
	Lost, CorruptDropped uint64
	// Duplicated, Reordered, Corrupted and Delayed count packets the
	// wrapper still delivered (or wrote), twice, late, damaged or late.
	Duplicated, Reordered, Corrupted, Delayed uint64
	// Dropped counts packets the wrapper took and then could hand to
	// nobody, by reason. These are not faults it meant to inject.
	Dropped Drops
}

// Drops are packets the wrapper took but could not deliver or write, by
// reason. Every one of them is also in the wrapper's link.Stats (see
// Endpoint.LinkStats).
type Drops struct {
	// Full counts delayed sent packets the wrapped endpoint refused for
	// lack of room when they fell due: no writer is left to retry them.
	Full uint64
	// Closed counts delayed sent packets the wrapped endpoint refused as
	// closed, and packets of either direction the wrapper still held
	// (delayed, or held back for reordering) when it was closed.
	Closed uint64
	// Failed counts delayed sent packets the wrapped endpoint failed with
	// any other error.
	Failed uint64
	// Detached counts received packets that found no stack attached when
	// they were to be delivered.
	Detached uint64
	// Limit counts packets dropped because the delay line held DelayLimit
	// packets already.
	Limit uint64
}

// Total returns how many packets were dropped, all reasons together.
func (d Drops) Total() uint64 { return d.Full + d.Closed + d.Failed + d.Detached + d.Limit }

// Endpoint is an impairing wrapper around a link endpoint. It is safe for
// concurrent use; its delay goroutine starts in Wrap and is joined by
// Close.
//
// It is transparent (STYLE rule 17): it implements every optional
// interface ustack or gVisor finds on a link endpoint by type assertion and
// passes each through to the wrapped endpoint: link.Reporter (with the
// impairment counters added), link.Coalescer, stack.GSOEndpoint, poll.Source,
// sched.WritableNotifier, CacheStats and Err. Where the wrapped endpoint
// lacks one, the method reports what such an endpoint would: no GSO, no
// busy-poll rounds, zero cache counters, no error; and writability is
// signalled from a timer, sched.DefaultRetryInterval after a refused
// write, so a qdisc never waits for a signal that cannot come.
type Endpoint struct {
	stack.LinkEndpoint
	opts Options

	// lower's optional interfaces, found once in Wrap.
	source   poll.Source
	notifier sched.WritableNotifier
	rounds   sched.RoundNotifier
	caches   cacheReporter
	errs     errReporter
	reporter link.Reporter
	merger   link.Coalescer
	gso      stack.GSOEndpoint

	rxMu, txMu  sync.Mutex // guard the random sources, held packets and due times
	rxRand      *rand.Rand
	txRand      *rand.Rand
	rxHeld      *stack.PacketBuffer // a received packet held for reordering
	rxHeldProto tcpip.NetworkProtocolNumber
	txHeld      *stack.PacketBuffer // a sent packet held for reordering
	// rxLastDue and txLastDue are the latest due time handed to the delay
	// line in each direction: a later packet is never due earlier, so
	// jitter never reorders.
	rxLastDue, txLastDue time.Time
	rxOffload            bool
	delays               *delayLine
	rx, tx               counts

	// writable is the qdisc's callback when lower cannot signal; retry
	// calls it after a refused write. Both are nil otherwise.
	writableMu sync.Mutex
	writable   func()
	retry      *time.Timer

	life linkutil.Lifecycle
}

type counts struct {
	lost, duplicated, reordered, corrupted, corruptDropped, delayed atomic.Uint64
	full, closed, failed, detached, limit                           atomic.Uint64
}

func (c *counts) snapshot() Counts {
	return Counts{
		Lost: c.lost.Load(), CorruptDropped: c.corruptDropped.Load(),
		Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(), Corrupted: c.corrupted.Load(), Delayed: c.delayed.Load(),
		Dropped: Drops{Full: c.full.Load(), Closed: c.closed.Load(), Failed: c.failed.Load(), Detached: c.detached.Load(), Limit: c.limit.Load()},
	}
}

// Wrap returns lower wrapped with the given impairments; nil opts means
// none (a transparent wrapper, whose faults are all zero). The wrapper
// owns lower: closing the wrapper closes it.
func Wrap(lower stack.LinkEndpoint, o *Options) (*Endpoint, error) {
	if lower == nil {
		return nil, errors.New("impair: nil link endpoint: open the link before wrapping it")
	}
	var opts Options
	if o != nil {
		opts = *o
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
	e.source, _ = lower.(poll.Source)
	e.notifier, _ = lower.(sched.WritableNotifier)
	e.rounds, _ = lower.(sched.RoundNotifier)
	e.caches, _ = lower.(cacheReporter)
	e.errs, _ = lower.(errReporter)
	e.reporter, _ = lower.(link.Reporter)
	e.merger, _ = lower.(link.Coalescer)
	e.gso, _ = lower.(stack.GSOEndpoint)
	e.delays = newDelayLine(e)
	return e, nil
}

// SetCoalescing implements link.Coalescer by passing the call through; a
// wrapped endpoint that merges nothing has nothing to turn off.
func (e *Endpoint) SetCoalescing(on bool) {
	if e.merger != nil {
		e.merger.SetCoalescing(on)
	}
}

// Counts returns what the wrapper did to received and to sent packets.
func (e *Endpoint) Counts() (rx, tx Counts) { return e.rx.snapshot(), e.tx.snapshot() }

// LinkStats implements link.Reporter: the wrapped endpoint's counters, if
// it keeps them (so RXPackets counts what it handed the wrapper), with the
// impairment counters of both directions added together, and the packets
// the wrapper dropped (Counts.Dropped) added where they belong: delayed
// sent packets refused as full or failed to TXErrors (the wrapped endpoint
// may also count a refusal in TXFull: it refused them to the wrapper, and
// nobody was left to retry them), refused as closed to TXClosed; received
// ones that found no stack to RXDetached; and those still held at Close to
// RXClosed or TXClosed. Delay-limit drops count as ImpairLost.
func (e *Endpoint) LinkStats() link.Stats {
	var s link.Stats
	if e.reporter != nil {
		s = e.reporter.LinkStats()
	}
	rx, tx := e.Counts()
	s.ImpairLost += rx.Lost + tx.Lost + rx.CorruptDropped + rx.Dropped.Limit + tx.Dropped.Limit
	s.ImpairDuplicated += rx.Duplicated + tx.Duplicated
	s.ImpairReordered += rx.Reordered + tx.Reordered
	s.ImpairCorrupted += rx.Corrupted + rx.CorruptDropped
	s.ImpairDelayed += rx.Delayed + tx.Delayed
	s.TXErrors += tx.Dropped.Full + tx.Dropped.Failed
	s.TXClosed += tx.Dropped.Closed
	s.RXDetached += rx.Dropped.Detached
	s.RXClosed += rx.Dropped.Closed
	return s
}

// GSOMaxSize implements stack.GSOEndpoint: the wrapped endpoint's limit.
func (e *Endpoint) GSOMaxSize() uint32 {
	if e.gso != nil {
		return e.gso.GSOMaxSize()
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: the wrapped endpoint's GSO.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.gso != nil {
		return e.gso.SupportedGSO()
	}
	return stack.GSONotSupported
}

// BusyPollBegin implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollBegin() {
	if e.source != nil {
		e.source.BusyPollBegin()
	}
}

// BusyPoll implements poll.Source: the wrapped endpoint's round delivers
// to the wrapper, which applies the receive impairments as for any other
// delivery. 0 if the wrapped endpoint cannot be polled.
func (e *Endpoint) BusyPoll() int {
	if e.source != nil {
		return e.source.BusyPoll()
	}
	return 0
}

// BusyPollEnd implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollEnd() {
	if e.source != nil {
		e.source.BusyPollEnd()
	}
}

// BusyPollWatchdog implements poll.Source by passing the call through.
func (e *Endpoint) BusyPollWatchdog() bool {
	if e.source != nil {
		return e.source.BusyPollWatchdog()
	}
	return false
}

// NotifyWritable implements sched.WritableNotifier. The wrapped
// endpoint's signal is passed through; if it has none, the wrapper calls
// f from a timer sched.DefaultRetryInterval after each write it refused.
func (e *Endpoint) NotifyWritable(f func()) {
	if e.notifier != nil {
		e.notifier.NotifyWritable(f)
		return
	}
	e.writableMu.Lock()
	e.writable = f
	e.writableMu.Unlock()
}

// NotifyRounds implements sched.RoundNotifier by handing the hooks to the
// wrapped endpoint, whose receive rounds deliver through the wrapper: what
// their delivery writes still leaves in one flush at the round's end.
// Packets the wrapper delays arrive later from its delay line, outside any
// round, and their replies leave as ordinary writes. Over an endpoint
// without rounds the hooks are never called, as for any such link.
func (e *Endpoint) NotifyRounds(begin, end func()) {
	if e.rounds != nil {
		e.rounds.NotifyRounds(begin, end)
	}
}

// refused arms the writability timer after a refused write when the
// wrapped endpoint cannot signal.
func (e *Endpoint) refused() {
	if e.notifier != nil {
		return
	}
	e.writableMu.Lock()
	defer e.writableMu.Unlock()
	if e.writable == nil || e.life.Closed() {
		return
	}
	if e.retry == nil {
		e.retry = time.AfterFunc(sched.DefaultRetryInterval, e.signalWritable)
	} else {
		e.retry.Reset(sched.DefaultRetryInterval)
	}
}

func (e *Endpoint) signalWritable() {
	e.writableMu.Lock()
	f := e.writable
	e.writableMu.Unlock()
	if f != nil {
		f()
	}
}

// CacheStats returns the wrapped endpoint's buffer cache counters, zero if
// it keeps none.
func (e *Endpoint) CacheStats() cache.Stats {
	if e.caches != nil {
		return e.caches.CacheStats()
	}
	return cache.Stats{}
}

// Err returns the wrapped endpoint's error (the device went away, say),
// nil if it reports none.
func (e *Endpoint) Err() error {
	if e.errs != nil {
		return e.errs.Err()
	}
	return nil
}

// Unwrap returns the wrapped endpoint, for its own methods (queue
// counters, names). The wrapper still owns it.
func (e *Endpoint) Unwrap() stack.LinkEndpoint { return e.LinkEndpoint }

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
// wrapped endpoint, stops the delay goroutine and the writability timer,
// and releases every packet held back or delayed, counting them in
// Drops.Closed. Idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.life.BeginClose(); !first {
		return
	}
	e.LinkEndpoint.Close()
	e.delays.close()
	e.writableMu.Lock()
	if e.retry != nil {
		e.retry.Stop()
	}
	e.writable = nil
	e.writableMu.Unlock()
	e.rxMu.Lock()
	if e.rxHeld != nil {
		e.rxHeld.DecRef()
		e.rxHeld = nil
		e.rx.closed.Add(1)
	}
	e.rxMu.Unlock()
	e.txMu.Lock()
	if e.txHeld != nil {
		e.txHeld.DecRef()
		e.txHeld = nil
		e.tx.closed.Add(1)
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
		e.rx.detached.Add(1)
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
	var release *stack.PacketBuffer
	var releaseProto tcpip.NetworkProtocolNumber
	switch {
	case lose:
		e.rxMu.Unlock()
		e.rx.lost.Add(1)
		return
	case im.Reorder > 0 && e.rxHeld == nil && r.Float64() < im.Reorder:
		e.rxHeld, e.rxHeldProto = e.copyOf(pkt, corrupt, bit), proto
		e.rxMu.Unlock()
		e.rx.reordered.Add(1)
		if corrupt {
			e.rx.corrupted.Add(1)
		}
		return
	case e.rxHeld != nil:
		release, releaseProto = e.rxHeld, e.rxHeldProto
		e.rxHeld = nil
	}
	copies := 1
	if dup {
		copies = 2
		e.rx.duplicated.Add(1)
	}
	if im.Delay > 0 || im.Jitter > 0 {
		// Everything goes through the delay line, even a packet whose
		// draw came out at zero, and in order: the line keeps equal due
		// times in the order they were added, and the due time never
		// goes back, so neither jitter nor a concurrent delivery
		// reorders. The held packet leaves right after this one.
		due := nextDue(im, r, &e.rxLastDue)
		for range copies {
			if corrupt {
				e.rx.corrupted.Add(1)
			}
			e.delays.add(due, delayedPacket{rx: true, proto: proto, pkt: e.copyOf(pkt, corrupt, bit)})
		}
		if release != nil {
			e.delays.add(due, delayedPacket{rx: true, proto: releaseProto, pkt: release})
		}
		e.rxMu.Unlock()
		return
	}
	e.rxMu.Unlock()
	for i := range copies {
		if corrupt || i > 0 {
			c := e.copyOf(pkt, corrupt, bit)
			if corrupt {
				e.rx.corrupted.Add(1)
			}
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

// copyOf returns a fresh inbound packet with pkt's bytes (a private copy,
// with bit number bit, modulo the packet's bits, flipped if corrupt), its
// link header parsed again. The caller owns the returned reference.
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

// WritePackets implements stack.LinkWriter: it applies the send
// impairments and writes what survives. The caller keeps its references
// and the list; the wrapper takes its own for what it holds or delays. A
// lost or delayed packet counts as written: the wire took it (a delayed
// one the wrapped endpoint later refuses is counted in Drops). If the
// wrapped endpoint takes only part of the batch, the originals it did not
// fully take are returned as unsent.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	im := &e.opts.TX
	if !im.Active() {
		n, err := e.LinkEndpoint.WritePackets(pkts)
		if n < pkts.Len() {
			e.refused()
		}
		return n, err
	}
	list := pkts.AsSlice()
	delaying := im.Delay > 0 || im.Jitter > 0
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
		case im.Reorder > 0 && e.txHeld == nil && r.Float64() < im.Reorder:
			e.txHeld = pkt.IncRef()
			e.tx.reordered.Add(1)
		default:
			copies := 1
			if im.Duplicate > 0 && r.Float64() < im.Duplicate {
				copies = 2
				e.tx.duplicated.Add(1)
			}
			held := e.txHeld
			e.txHeld = nil
			if delaying {
				// As on receive: in order, the held packet right after.
				due := nextDue(im, r, &e.txLastDue)
				for range copies {
					e.delays.add(due, delayedPacket{pkt: pkt.IncRef()})
				}
				if held != nil {
					e.delays.add(due, delayedPacket{pkt: held})
				}
				break
			}
			for range copies {
				out.PushBack(pkt)
			}
			if held != nil {
				out.PushBack(held)
				extra = append(extra, held)
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
	e.refused()
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
