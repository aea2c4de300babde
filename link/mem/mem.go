package mem

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
	_ link.Reporter      = (*Endpoint)(nil)
	_ poll.Source        = (*Endpoint)(nil)
)

// Endpoint is one end of an in-memory NIC pair. It is safe for concurrent
// use. Its receive goroutine starts on the first Attach with a dispatcher
// and is stopped and joined by Close.
type Endpoint struct {
	opts Options // immutable after Pair
	name string  // "a" or "b", for messages

	mtu atomic.Uint32

	// tx is the ring this endpoint writes; the peer's goroutine drains it.
	// rx is the ring the peer writes; this endpoint's goroutine drains it.
	tx, rx *ring

	linkutil.Lifecycle
	rounds linkutil.Rounds

	stop chan struct{}
	done chan struct{}
	// rxOwner is held by whoever takes and delivers a round from rx: the
	// receive goroutine or a busy-polling reader. One owner at a time
	// keeps rounds in ring order; it guards receiver.
	rxOwner    sync.Mutex
	receiver   *receiver
	pollClosed bool // guarded by rxOwner: Close has taken the receiver back

	rxPackets, rxBytes, rxRounds      atomic.Uint64
	rxDetached, rxMalformed, rxClosed atomic.Uint64
	polledRounds                      atomic.Uint64
}

// ring is one direction of the pair: a bounded FIFO of packets written by
// one endpoint and drained by the other's receive goroutine.
type ring struct {
	mu     sync.Mutex
	pkts   linkutil.PacketRing // each holds one reference taken at write
	closed bool                // no more writes: the receiving endpoint is closed
	parked bool                // the receive goroutine sleeps until wake
	wake   chan struct{}
	// polling counts readers busy polling this ring: while it is above
	// zero a write does not wake the parked receive goroutine, and the
	// last reader to stop wakes it if packets wait (prefer-busy-poll).
	polling int

	// writable, if set, is called after the receiver frees room following
	// a refused write (wantWritable), so a qdisc can resume.
	writable     func()
	wantWritable bool

	// The writer's TX counters, updated under mu, which the writer holds
	// anyway: no extra shared cache line per packet.
	txPackets, txBytes, txCalls, txFull, txClosed uint64
}

func newRing(size int) *ring {
	return &ring{pkts: linkutil.NewPacketRing(size), wake: make(chan struct{}, 1)}
}

// Pair returns two connected endpoints: what one writes, the other
// receives. A nil opts means DefaultOptions.
func Pair(opts *Options) (*Endpoint, *Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, nil, err
	}
	ab, ba := newRing(o.RingSize), newRing(o.RingSize)
	a := &Endpoint{opts: o, name: "a", tx: ab, rx: ba}
	b := &Endpoint{opts: o, name: "b", tx: ba, rx: ab}
	for _, e := range []*Endpoint{a, b} {
		e.mtu.Store(o.MTU)
		e.stop = make(chan struct{})
		e.done = make(chan struct{})
		e.receiver = newReceiver(e)
	}
	return a, b, nil
}

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. Values outside MinMTU..MaxMTU are
// clamped into it.
func (e *Endpoint) SetMTU(mtu uint32) {
	e.mtu.Store(min(max(mtu, MinMTU), MaxMTU))
}

// MaxHeaderLength implements stack.LinkEndpoint: raw IP has no link header.
func (*Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has no link address.
func (*Endpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint; raw IP has no link address,
// so it does nothing.
func (*Endpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	if e.opts.ChecksumOffload {
		return stack.CapabilityTXChecksumOffload | stack.CapabilityRXChecksumOffload
	}
	return stack.CapabilityNone
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *Endpoint) GSOMaxSize() uint32 {
	if e.opts.GSO {
		return e.opts.GSOMaxSize
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: with GSO on, TCP hands the
// link whole super-segments, as it would to a device with TSO.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.opts.GSO {
		return stack.HostGSOSupported
	}
	return stack.GSONotSupported
}

// ARPHardwareType implements stack.LinkEndpoint.
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: raw IP adds none.
func (*Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: raw IP has none to parse.
func (*Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// Attach implements stack.LinkEndpoint. The first Attach with a dispatcher
// starts the receive goroutine; Attach(nil) detaches at once, and packets
// that arrive while detached are dropped and counted in RXDetached.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.AttachAndStart(d, func() { go e.receiver.loop() })
}

// Close implements stack.LinkEndpoint. It runs the on-close action (which
// removes the NIC from its stack), stops and joins the receive goroutine,
// refuses further writes in both directions, and releases every packet
// still queued towards this endpoint, counting them in RXClosed. Packets
// this endpoint already wrote are still delivered to the peer. Close is
// idempotent.
func (e *Endpoint) Close() {
	first, started := e.BeginClose()
	if !first {
		return
	}
	close(e.stop)
	if started {
		<-e.done
	}
	// From here no busy-polling reader touches the receiver either.
	e.rxOwner.Lock()
	e.pollClosed = true
	e.rxOwner.Unlock()
	e.tx.closeWrites()
	e.rxClosed.Add(uint64(e.rx.close()))
}

// closeWrites refuses further writes; what the ring holds is still
// delivered by the receiving endpoint, or released when that one closes.
func (r *ring) closeWrites() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// close refuses further writes and releases what the ring holds, returning
// how many packets it released.
func (r *ring) close() int {
	r.mu.Lock()
	r.closed = true
	pkts := r.pkts.Drain(nil)
	r.mu.Unlock()
	for _, p := range pkts {
		p.DecRef()
	}
	return len(pkts)
}

// WritePackets implements stack.LinkWriter. It queues as many packets as
// the ring has room for, taking a reference to each; the caller keeps its
// own references and the list. If the ring fills, it returns how many it
// took and ErrNoBufferSpace, and the rest stay the caller's: that is
// backpressure, counted in TXFull, never a drop. After Close it takes
// nothing and returns ErrClosedForSend.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	list := pkts.AsSlice()
	if len(list) == 0 {
		return 0, nil
	}
	e.opts.TXCost.spin(len(list))
	r := e.tx
	r.mu.Lock()
	r.txCalls++
	if r.closed {
		r.txClosed += uint64(len(list))
		r.mu.Unlock()
		return 0, &tcpip.ErrClosedForSend{}
	}
	n, bytes := r.pkts.PushRefs(list)
	r.txPackets += uint64(n)
	r.txBytes += uint64(bytes)
	refused := len(list) - n
	r.txFull += uint64(refused)
	if refused > 0 {
		r.wantWritable = true
	}
	wake := r.parked && n > 0 && r.polling == 0
	if wake {
		r.parked = false
	}
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	if refused > 0 {
		return n, &tcpip.ErrNoBufferSpace{}
	}
	return n, nil
}

// NotifyWritable implements sched.WritableNotifier: after a write that
// the ring refused, f is called once the peer's receive goroutine has made
// room, from that goroutine, with no lock held.
func (e *Endpoint) NotifyWritable(f func()) {
	e.tx.mu.Lock()
	e.tx.writable = f
	e.tx.mu.Unlock()
}

// NotifyRounds implements sched.RoundNotifier: begin and end are called
// in the receive goroutine around each batch it delivers, so what the
// batch's delivery writes (ICMP and ARP replies, ACKs sent inline) leaves
// this end in one write at the batch's end.
func (e *Endpoint) NotifyRounds(begin, end func()) { e.rounds.Set(begin, end) }

// LinkStats implements link.Reporter. A mem pair injects no faults (wrap
// an endpoint with package impair for that), so the Impair counters stay
// zero.
func (e *Endpoint) LinkStats() link.Stats {
	e.tx.mu.Lock()
	s := link.Stats{
		TXPackets: e.tx.txPackets,
		TXBytes:   e.tx.txBytes,
		TXCalls:   e.tx.txCalls,
		TXFull:    e.tx.txFull,
		TXClosed:  e.tx.txClosed,
	}
	e.tx.mu.Unlock()
	s.RXPackets = e.rxPackets.Load()
	s.RXBytes = e.rxBytes.Load()
	s.RXRounds = e.rxRounds.Load()
	s.RXBusyPolled = e.polledRounds.Load()
	s.RXDetached = e.rxDetached.Load()
	s.RXMalformed = e.rxMalformed.Load()
	s.RXClosed = e.rxClosed.Load()
	return s
}

// Backlog returns how many packets are queued towards this endpoint and
// not yet delivered.
func (e *Endpoint) Backlog() int {
	e.rx.mu.Lock()
	defer e.rx.mu.Unlock()
	return e.rx.pkts.Len()
}

// BusyPollBegin implements poll.Source.
func (e *Endpoint) BusyPollBegin() {
	e.rx.mu.Lock()
	e.rx.polling++
	e.rx.mu.Unlock()
}

// BusyPollEnd implements poll.Source: the last reader to stop wakes the
// receive goroutine if packets arrived that nobody took.
func (e *Endpoint) BusyPollEnd() {
	r := e.rx
	r.mu.Lock()
	r.polling--
	wake := r.polling == 0 && r.rearmLocked()
	r.mu.Unlock()
	if wake {
		r.kick()
	}
}

// BusyPollWatchdog implements poll.Source: if readers claim to poll, it
// wakes the receive goroutine should packets wait, and reports that they
// do.
func (e *Endpoint) BusyPollWatchdog() bool {
	r := e.rx
	r.mu.Lock()
	polling := r.polling > 0
	wake := polling && r.rearmLocked()
	r.mu.Unlock()
	if wake {
		r.kick()
	}
	return polling
}

// rearmLocked marks the receive goroutine awake if it is parked with
// packets waiting, and reports whether the caller must kick it.
func (r *ring) rearmLocked() bool {
	if !r.parked || r.pkts.Len() == 0 {
		return false
	}
	r.parked = false
	return true
}

func (r *ring) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// BusyPoll implements poll.Source: it takes and delivers one round (up to
// a batch) from the caller's goroutine, unless the receive goroutine or
// another reader is delivering one, or the endpoint is not attached.
func (e *Endpoint) BusyPoll() int {
	if !e.IsAttached() || !e.rxOwner.TryLock() {
		return 0
	}
	defer e.rxOwner.Unlock()
	if e.pollClosed {
		return 0
	}
	rc := e.receiver
	k, writable := rc.take()
	if writable != nil {
		writable()
	}
	if k > 0 {
		rc.deliverBatch(rc.batch[:k])
		e.polledRounds.Add(1)
	}
	return k
}

// receiver is the state of one endpoint's receive goroutine. Only the
// holder of the endpoint's rxOwner touches it.
type receiver struct {
	e     *Endpoint
	r     *ring
	batch []*stack.PacketBuffer
}

func newReceiver(e *Endpoint) *receiver {
	return &receiver{e: e, r: e.rx, batch: make([]*stack.PacketBuffer, e.opts.BatchSize)}
}

// loop is the receive goroutine: it takes up to a batch from the ring,
// delivers it, and parks when the ring is empty, like a NAPI poll loop.
func (rc *receiver) loop() {
	defer close(rc.e.done)
	for {
		rc.e.rxOwner.Lock()
		k, writable := rc.take()
		if writable != nil {
			writable()
		}
		if k > 0 {
			rc.deliverBatch(rc.batch[:k])
			rc.e.rxOwner.Unlock()
			continue
		}
		rc.e.rxOwner.Unlock()
		select {
		case <-rc.r.wake:
		case <-rc.e.stop:
			return
		}
	}
}

// take moves up to a batch of packets from the ring into rc.batch. If the
// ring is empty it returns 0 and has marked the ring parked. If it made
// room after a refused write, it returns the writer's callback to call.
func (rc *receiver) take() (k int, writable func()) {
	r := rc.r
	r.mu.Lock()
	defer r.mu.Unlock()
	k = r.pkts.PopInto(rc.batch)
	if k == 0 {
		r.parked = true
	} else if r.wantWritable && r.pkts.Room() >= r.pkts.WakeRoom() {
		r.wantWritable = false
		writable = r.writable
	}
	return k, writable
}

func (rc *receiver) dispatcher() stack.NetworkDispatcher { return rc.e.Dispatcher() }

// deliverBatch delivers one round and releases the ring's references.
func (rc *receiver) deliverBatch(batch []*stack.PacketBuffer) {
	d := rc.dispatcher()
	if len(batch) > 0 {
		if end := rc.e.rounds.Begin(); end != nil {
			defer end()
		}
	}
	for i, pkt := range batch {
		rc.deliver(d, pkt)
		pkt.DecRef()
		batch[i] = nil
	}
	rc.e.rxRounds.Add(1)
}

// deliver hands a fresh inbound packet with pkt's bytes to d. The bytes
// are shared, not copied: gVisor copies a shared chunk before it writes.
func (rc *receiver) deliver(d stack.NetworkDispatcher, pkt *stack.PacketBuffer) {
	proto, size := pkt.NetworkProtocolNumber, pkt.Size()
	switch {
	case d == nil:
		rc.e.rxDetached.Add(1)
		return
	case proto != header.IPv4ProtocolNumber && proto != header.IPv6ProtocolNumber:
		rc.e.rxMalformed.Add(1)
		return
	}
	np := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: pkt.ToBuffer()})
	rc.e.rxPackets.Add(1)
	rc.e.rxBytes.Add(uint64(size))
	d.DeliverNetworkPacket(proto, np)
	np.DecRef()
}
