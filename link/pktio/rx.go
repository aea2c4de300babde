package pktio

import (
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

// rxQueue is the bounded FIFO of written packets waiting for a receive
// round, used when a Write finds another round in progress.
type rxQueue struct {
	mu      sync.Mutex
	cond    sync.Cond // writers wait on it for room or Close
	pkts    linkutil.PacketRing
	closed  bool
	writers int // Writes waiting on cond
}

func (q *rxQueue) init(size int) {
	q.pkts = linkutil.NewPacketRing(size)
	q.cond.L = &q.mu
}

func (q *rxQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pkts.Len() == 0
}

func (q *rxQueue) shut() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// push queues pkt, waiting for room while the queue is full, and reports
// whether it did (false: closed; pkt stays the caller's).
func (q *rxQueue) push(pkt *stack.PacketBuffer, waited *bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.pkts.Full() && !q.closed {
		*waited = true
		q.writers++
		q.cond.Wait()
		q.writers--
	}
	if q.closed {
		return false
	}
	return q.pkts.Push(pkt)
}

// take moves up to len(batch) packets into batch and returns how many.
func (q *rxQueue) take(batch []*stack.PacketBuffer) int {
	q.mu.Lock()
	k := q.pkts.PopInto(batch)
	if k > 0 && q.writers > 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
	return k
}

// release drops what the queue holds and returns how many packets that
// was. Only after shut.
func (q *rxQueue) release() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := 0
	for p := q.pkts.Pop(); p != nil; p = q.pkts.Pop() {
		p.DecRef()
		k++
	}
	return k
}

// Write hands the stack the packets in bufs, each at bufs[i][offset:]
// (empty ones are skipped), and returns how many buffers it consumed.
// This is tun.Device.Write of wireguard-go. The bytes are copied before
// Write returns; the buffers stay the caller's.
//
// If no receive round is in progress, the packets are delivered in the
// caller's goroutine, their TCP segments coalesced by GRO first. If one
// is, they are queued for it, and Write waits while that queue is full:
// the stack never drops a written packet for lack of room. Packets that
// are neither IPv4 nor IPv6 or are cut short are dropped and counted
// (RXMalformed), as are packets with a wrong checksum (RXBadChecksum) and
// packets written while no stack is attached (RXDetached). With
// Options.VNetHeader each packet starts with a virtio-net header. After
// Close, Write returns ErrClosed.
func (e *Endpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	// Bypass, as a qdisc bypasses an idle queue: deliver at once unless a
	// round is running or packets wait for one (they go first).
	if e.gate.Owner.TryLock() {
		if !e.rxShut && e.rx.empty() {
			e.rxInline.Add(1)
			e.deliverInline(bufs, offset)
			e.gate.Owner.Unlock()
			return len(bufs), nil
		}
		e.gate.Owner.Unlock()
	}
	waited := false
	for i, b := range bufs {
		pkt := e.packetFrom(b, offset)
		if pkt == nil {
			continue
		}
		if !e.rx.push(pkt, &waited) {
			pkt.DecRef()
			e.kickRX()
			return i, ErrClosed
		}
	}
	if waited {
		e.rxWaits.Add(1)
	}
	e.kickRX()
	return len(bufs), nil
}

func (e *Endpoint) kickRX() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// deliverInline is a receive round over bufs. Called with gate.Owner
// held.
func (e *Endpoint) deliverInline(bufs [][]byte, offset int) {
	d := e.Dispatcher()
	if d != nil {
		e.gro.Begin(d)
	}
	n := 0
	for _, b := range bufs {
		pkt := e.packetFrom(b, offset)
		if pkt == nil {
			continue
		}
		e.enqueue(d, pkt)
		n++
	}
	e.finishRound(n)
}

// enqueue hands one packet to GRO (or drops it, counted, if detached)
// and releases the caller's reference.
func (e *Endpoint) enqueue(d stack.NetworkDispatcher, pkt *stack.PacketBuffer) {
	if d == nil {
		e.rxDetached.Add(1)
	} else {
		e.rxPackets.Add(1)
		e.rxBytes.Add(uint64(pkt.Size()))
		e.gro.Enqueue(pkt)
	}
	pkt.DecRef()
}

// finishRound ends a receive round of n packets: nothing stays in GRO
// once it returns.
func (e *Endpoint) finishRound(n int) {
	e.gro.Flush()
	if n > 0 {
		e.rxRounds.Add(1)
	}
}

// round delivers up to a batch of queued packets and returns how many.
// Called with gate.Owner held.
func (e *Endpoint) round() int {
	if e.rxShut {
		return 0
	}
	k := e.rx.take(e.batch)
	if k == 0 {
		return 0
	}
	d := e.Dispatcher()
	if d != nil {
		e.gro.Begin(d)
	}
	for i := 0; i < k; i++ {
		e.enqueue(d, e.batch[i])
		e.batch[i] = nil
	}
	e.finishRound(k)
	return k
}

// packetFrom copies one written packet into a new packet buffer, or
// counts it and returns nil if it cannot be delivered.
func (e *Endpoint) packetFrom(b []byte, offset int) *stack.PacketBuffer {
	if offset > len(b) {
		e.rxErrors.Add(1)
		return nil
	}
	ip := b[offset:]
	if len(ip) == 0 {
		return nil
	}
	var h vnet.Header
	if e.opts.VNetHeader {
		var err error
		if h, err = vnet.Decode(ip); err != nil {
			e.rxErrors.Add(1)
			return nil
		}
		ip = ip[vnet.HeaderSize:]
		if h.Check(len(ip)) != nil {
			e.rxErrors.Add(1)
			return nil
		}
		switch h.GSOType &^ vnet.GSOECN {
		case vnet.GSONone:
		case vnet.GSOTCPv4, vnet.GSOTCPv6:
			// gVisor takes a TCP segment of any size: it goes up whole,
			// as a GRO packet would.
			e.rxSuper.Add(1)
		default:
			// UDP super-packets would need cutting, which only the TUN
			// endpoint does; a consumer of this one never needs to send
			// them.
			e.rxErrors.Add(1)
			return nil
		}
	}
	// A partial or verified checksum behind the header is the writer's
	// promise, as a kernel's is to a TUN reader; anything else is checked
	// here, once, since the endpoint claims RX checksum offload.
	switch vnet.Inspect(h, ip) {
	case vnet.Bad:
		e.rxBadCsum.Add(1)
		return nil
	case vnet.Malformed:
		e.rxMalformed.Add(1)
		return nil
	}
	proto, ok := link.NetworkProtocol(ip)
	if !ok {
		e.rxMalformed.Add(1)
		return nil
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ip)})
	pkt.NetworkProtocolNumber = proto
	pkt.RXChecksumValidated = true
	return pkt
}

// rxLoop is the receive goroutine: it delivers the packets Writes queued
// while another round ran, and parks when there are none.
func (e *Endpoint) rxLoop() {
	defer close(e.done)
	for {
		// While busy-polling readers drive the queue, stand aside until
		// the last one stops or the watchdog calls.
		if !e.gate.WaitTurn(e.stop) {
			return
		}
		e.gate.Owner.Lock()
		k := e.round()
		e.gate.Received()
		e.gate.Owner.Unlock()
		if k > 0 {
			continue
		}
		select {
		case <-e.kick:
		case <-e.stop:
			return
		}
	}
}

// BusyPollBegin implements poll.Source.
func (e *Endpoint) BusyPollBegin() { e.gate.Begin() }

// BusyPollEnd implements poll.Source: the last reader to stop lets the
// receive goroutine run again.
func (e *Endpoint) BusyPollEnd() { e.gate.End() }

// BusyPollWatchdog implements poll.Source.
func (e *Endpoint) BusyPollWatchdog() bool { return e.gate.Watchdog() }

// BusyPoll implements poll.Source: it runs one receive round from the
// caller's goroutine, unless another round is running or the endpoint is
// not attached.
func (e *Endpoint) BusyPoll() int {
	if !e.IsAttached() || !e.gate.Owner.TryLock() {
		return 0
	}
	defer e.gate.Owner.Unlock()
	k := e.round()
	if k > 0 {
		e.gate.CountPolled()
	}
	return k
}
