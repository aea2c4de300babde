package tun

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
	_ link.Reporter      = (*Endpoint)(nil)
	_ poll.Source        = (*Endpoint)(nil)
)

// maxPacketSize is the largest IP packet the kernel can hand over: an IPv6
// header plus the largest payload length (65535). A TSO or GRO
// super-segment is at most 64 KiB (the device's gso_max_size) and an MTU
// at most MaxMTU, so everything fits.
const maxPacketSize = header.IPv6MinimumSize + 0xffff

// rxBufSize is the receive landing buffer of one queue: a virtio-net
// header and the largest packet, plus one byte, so that a read that fills
// the buffer is recognisably truncated rather than silently accepted.
const rxBufSize = vnet.HeaderSize + maxPacketSize + 1

// Endpoint is a TUN device as a gVisor link endpoint. It is safe for
// concurrent use. Its receive goroutines start on the first Attach with a
// dispatcher; Close stops and joins every goroutine it started and closes
// the device's file descriptors.
type Endpoint struct {
	name     string   // the interface name, as the kernel has it
	opts     Options  // immutable after Open
	offloads Offloads // immutable after Open
	gsoKind  stack.SupportedGSO
	queues   []*queue           // immutable after Open
	gates    linkutil.PollGates // the queues' busy-poll gates, in queue order

	mtu atomic.Uint32
	linkutil.Lifecycle
	writable atomic.Pointer[func()]
	err      atomic.Pointer[error] // the first device failure

	txCalls, txSuper, rxSuper, rxUSO, rxUSODatagrams atomic.Uint64

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // Add only at Attach or through IfOpen
}

// queue is one of the device's queues: a file descriptor, the state of its
// receive goroutine, and its counters.
type queue struct {
	e   *Endpoint
	idx int
	dev *device // the descriptor; OS-specific

	// Receive state, owned by whoever holds gate.Owner: the queue's
	// receive goroutine or a busy-polling reader. With the cache on, the
	// landing buffers (for reads, and for splitting USO) come from rx,
	// whose owner is the holder of gate.Owner, for a run of rounds, and go
	// back, parked, when the receive goroutine finds the queue empty, so
	// an idle queue holds none after cache.DefaultIdleAfter. With it off
	// (or while no cache exists), buf and uso are kept for good.
	gate  linkutil.PollGate
	rx    *cache.Cache[[]byte]
	bufIt *cache.Item[[]byte]
	usoIt *cache.Item[[]byte]
	buf   []byte // landing buffer of rxBufSize, without the cache; made on first use
	// pollRound is busyPoll's round, bound once so that a round
	// allocates nothing; it leaves its result in pollN and pollErr.
	pollRound func(fd uintptr)
	pollN     int
	pollErr   error
	uso       []byte // datagram buffer for splitting USO, without the cache; made on first use

	// wantWritable is set when a write was refused for lack of room; the
	// watcher clears it when it signals. kick wakes the watcher.
	wantWritable atomic.Bool
	kick         chan struct{}
	watching     bool // the watcher runs; set through e.IfOpen

	txPackets, txBytes, txSyscalls, txFull, txErrors, txClosed atomic.Uint64
	rxPackets, rxBytes, rxRounds, rxSyscalls                   atomic.Uint64
	rxErrors, rxBadChecksum, rxDetached, rxMalformed           atomic.Uint64
}

// newEndpoint builds an Endpoint around opened devices; Open calls it once
// the devices are configured.
func newEndpoint(name string, o Options, off Offloads, devs []*device) *Endpoint {
	e := &Endpoint{name: name, opts: o, offloads: off, stop: make(chan struct{})}
	switch {
	case off.TSO():
		e.gsoKind = stack.HostGSOSupported
	case o.SoftwareGSO:
		e.gsoKind = stack.GVisorGSOSupported
	default:
		e.gsoKind = stack.GSONotSupported
	}
	e.mtu.Store(o.MTU)
	for i, d := range devs {
		q := &queue{e: e, idx: i, dev: d, kick: make(chan struct{}, 1)}
		if !o.NoCache {
			q.rx = cache.New(cache.Config[[]byte]{
				Name:  "tun landing buffers",
				New:   func() []byte { return make([]byte, rxBufSize) },
				Reset: func(b *[]byte) { *b = (*b)[:cap(*b)] },
				Size:  func(b *[]byte) int { return cap(*b) },
				// The read buffer and the USO buffer.
				MaxItems: 2,
				MaxBytes: 2 * rxBufSize,
			})
		}
		e.queues = append(e.queues, q)
		e.gates = append(e.gates, &e.queues[i].gate)
	}
	return e
}

// Name returns the device's interface name.
func (e *Endpoint) Name() string { return e.name }

// Queues returns the number of queues.
func (e *Endpoint) Queues() int { return len(e.queues) }

// Offloads returns what was negotiated with the kernel.
func (e *Endpoint) Offloads() Offloads { return e.offloads }

// Err returns nil while the device works, and afterwards the failure
// that stopped it, wrapping ErrDeviceGone: typically the device was deleted
// under the endpoint. It is safe to call at any time.
func (e *Endpoint) Err() error {
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. It changes the MTU gVisor uses,
// clamped to MinMTU..MaxMTU, not the device's: the device lives in the
// namespace Open ran in, which the caller may no longer be in.
func (e *Endpoint) SetMTU(mtu uint32) { e.mtu.Store(min(max(mtu, MinMTU), MaxMTU)) }

// MaxHeaderLength implements stack.LinkEndpoint: raw IP has no link header.
func (*Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has no link address.
func (*Endpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint; raw IP has no link address,
// so it does nothing.
func (*Endpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint. With the virtio-net header
// the endpoint claims RX checksum offload: it checks every received packet
// itself (the kernel's verdict or vnet.Inspect) before gVisor sees it. It
// never claims TX checksum offload, so gVisor computes the checksums of
// every packet that is not a GSO super-segment.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	if e.offloads.VNetHeader {
		return stack.CapabilityRXChecksumOffload
	}
	return stack.CapabilityNone
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *Endpoint) GSOMaxSize() uint32 {
	switch e.gsoKind {
	case stack.HostGSOSupported:
		return HostGSOMaxSize
	case stack.GVisorGSOSupported:
		return stack.GVisorGSOMaxSize
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: host GSO when the kernel
// negotiated TSO, gVisor's software GSO when Options.SoftwareGSO asked for
// it instead, and none otherwise (gVisor then sends MTU-sized segments).
func (e *Endpoint) SupportedGSO() stack.SupportedGSO { return e.gsoKind }

// ARPHardwareType implements stack.LinkEndpoint.
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: raw IP adds none.
func (*Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: raw IP has none to parse.
func (*Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// Attach implements stack.LinkEndpoint. The first Attach with a dispatcher
// starts one receive goroutine per queue. Attach(nil) detaches at once
// without waiting: gVisor calls it holding the stack's lock, which a
// delivery in progress may be waiting for. Packets that arrive while
// detached are read and dropped, and counted in RXDetached.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.AttachAndStart(d, func() {
		for _, q := range e.queues {
			e.wg.Add(1)
			go q.rxLoop()
		}
	})
}

// Close implements stack.LinkEndpoint. It runs the on-close action (which
// removes the NIC from its stack), closes every queue's file descriptor,
// which wakes the goroutines parked on them and deletes the device if Open
// created it and no other process holds it open, and joins every goroutine.
// Writes after Close are refused and counted in TXClosed. Close is
// idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.BeginClose(); !first {
		return
	}
	close(e.stop)
	for _, q := range e.queues {
		q.dev.close()
	}
	e.wg.Wait()
	for _, q := range e.queues {
		q.closeCache()
	}
}

// landing returns the buffer a read lands in; the caller holds
// q.gate.Owner.
func (q *queue) landing() []byte {
	if q.rx == nil {
		if q.buf == nil {
			q.buf = make([]byte, rxBufSize)
		}
		return q.buf
	}
	if q.bufIt == nil {
		q.bufIt = q.rx.Get()
	}
	return q.bufIt.V
}

// usoBuf returns the buffer USO datagrams are split into; the caller holds
// q.gate.Owner (or drives receive by hand, in tests).
func (q *queue) usoBuf() []byte {
	if q.rx == nil {
		if q.uso == nil {
			q.uso = make([]byte, maxPacketSize)
		}
		return q.uso
	}
	if q.usoIt == nil {
		q.usoIt = q.rx.Get()
	}
	return q.usoIt.V
}

// park gives the landing buffers back to the cache and parks it, before
// the receive goroutine parks on an empty queue; the caller holds
// q.gate.Owner.
func (q *queue) park() {
	if q.rx == nil {
		return
	}
	for _, it := range []**cache.Item[[]byte]{&q.bufIt, &q.usoIt} {
		if *it != nil {
			q.rx.Put(*it)
			*it = nil
		}
	}
	q.rx.Park()
}

// closeCache releases the landing buffers once no goroutine receives:
// Close calls it after joining the receive goroutines, and takes
// gate.Owner so that a busy poller's round in progress ends first.
func (q *queue) closeCache() {
	if q.rx == nil {
		return
	}
	q.gate.Owner.Lock()
	q.bufIt, q.usoIt = nil, nil
	q.rx.Close()
	q.gate.Owner.Unlock()
}

// CacheStats returns what the queues' landing-buffer caches counted (all
// zero with NoCache).
func (e *Endpoint) CacheStats() cache.Stats {
	var s cache.Stats
	for _, q := range e.queues {
		if q.rx != nil {
			s.Add(q.rx.Stats())
		}
	}
	return s
}

// NotifyWritable implements sched.WritableNotifier: after a write that a
// queue refused for lack of room (ErrNoBufferSpace), f is called once that
// queue's descriptor is writable again, from the queue's watcher goroutine,
// with no lock held.
func (e *Endpoint) NotifyWritable(f func()) {
	if f == nil {
		e.writable.Store(nil)
		return
	}
	e.writable.Store(&f)
}

// txOutcome classifies one write.
type txOutcome int

const (
	txSent   txOutcome = iota
	txFull             // EAGAIN: no room now; retry after NotifyWritable
	txClosed           // the endpoint was closed
	txGone             // the device is gone: nothing more will leave
	txFailed           // this packet failed; the next one may not
)

// WritePackets implements stack.LinkWriter. It writes each packet with one
// writev to the queue its flow hashes to: with the virtio-net header from
// vnet.ForTX in front (a super-segment goes whole, for the kernel to
// segment), then the packet's own views, uncopied. The caller keeps its
// references and the list; the device has copied what it accepted by the
// time the call returns.
//
// It stops at the first packet it cannot write and returns how many it
// wrote with the reason: ErrNoBufferSpace when the device is full (the rest
// stay the caller's, counted in TXFull, and NotifyWritable's function is
// called once there is room); ErrClosedForSend after Close (TXClosed) or
// once the device is gone (the rest are dropped, counted in TXErrors, and
// Err says why); or the error of a packet the device refused (that one
// packet is dropped and counted in TXErrors, the rest are not tried).
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	e.txCalls.Add(1)
	list := pkts.AsSlice()
	nq := len(e.queues)
	for i, pkt := range list {
		q := e.queues[0]
		if nq > 1 {
			q = e.queues[link.QueueIndex(link.PacketFlowHash(pkt), nq)]
		}
		if e.err.Load() != nil {
			q.txErrors.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		}
		var h vnet.Header
		if e.offloads.VNetHeader {
			h = vnet.ForTX(pkt, 0)
		}
		out, terr := q.write(h, pkt)
		switch out {
		case txSent:
			q.txPackets.Add(1)
			q.txBytes.Add(uint64(pkt.Size()))
			if h.IsGSO() {
				e.txSuper.Add(1)
			}
			continue
		case txFull:
			q.txFull.Add(uint64(len(list) - i))
			q.armWatcher()
			return i, &tcpip.ErrNoBufferSpace{}
		case txClosed:
			q.txClosed.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		case txGone:
			q.txErrors.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		default:
			q.txErrors.Add(1)
			return i, terr
		}
	}
	return len(list), nil
}

// armWatcher asks for a writability signal after a refused write, starting
// the queue's watcher goroutine the first time. Setting wantWritable before
// the kick means the watcher's check for room happens after the refusal, so
// room made in between is not missed.
func (q *queue) armWatcher() {
	q.wantWritable.Store(true)
	e := q.e
	e.IfOpen(func() {
		if !q.watching {
			q.watching = true
			e.wg.Add(1)
			go q.watchLoop()
		}
	})
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// receive handles one frame read from the queue: the virtio-net header (if
// on) and the IP packet, in the queue's landing buffer b, which is reused as
// soon as receive returns. It checks the header and the checksums, splits a
// UDP super-packet, and delivers.
func (q *queue) receive(b []byte) {
	if len(b) >= rxBufSize {
		// The packet filled the buffer: it was larger and got cut.
		q.rxErrors.Add(1)
		return
	}
	if !q.e.offloads.VNetHeader {
		q.deliver(b)
		return
	}
	h, err := vnet.Decode(b)
	if err != nil {
		q.rxErrors.Add(1)
		return
	}
	ip := b[vnet.HeaderSize:]
	if h.Check(len(ip)) != nil {
		q.rxErrors.Add(1)
		return
	}
	switch vnet.Inspect(h, ip) {
	case vnet.Bad:
		q.rxBadChecksum.Add(1)
		return
	case vnet.Malformed:
		q.rxMalformed.Add(1)
		return
	}
	switch h.GSOType &^ vnet.GSOECN {
	case vnet.GSOUDPL4:
		if _, err := splitUSO(h, ip, q.usoBuf(), q.countUSO, q.deliver); err != nil {
			q.rxErrors.Add(1)
		}
		return
	case vnet.GSOTCPv4, vnet.GSOTCPv6:
		// gVisor takes a TCP segment of any size: deliver it whole, as
		// Linux's own stack takes a GRO packet.
		q.e.rxSuper.Add(1)
	}
	q.deliver(ip)
}

// countUSO counts a UDP super-packet about to be split into n datagrams.
func (q *queue) countUSO(n int) {
	q.e.rxUSO.Add(1)
	q.e.rxUSODatagrams.Add(uint64(n))
}

// deliver copies the IP packet ip once into a right-sized pooled view and
// hands it to the attached dispatcher. ip is the caller's and may be
// reused as soon as deliver returns.
func (q *queue) deliver(ip []byte) {
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		q.rxMalformed.Add(1)
		return
	}
	d := q.e.Dispatcher()
	if d == nil {
		q.rxDetached.Add(1)
		return
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		Payload: buffer.MakeWithView(buffer.NewViewWithData(ip)),
	})
	q.rxPackets.Add(1)
	q.rxBytes.Add(uint64(len(ip)))
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
}

// LinkStats implements link.Reporter: the sum over all queues.
func (e *Endpoint) LinkStats() link.Stats {
	var s link.Stats
	for _, q := range e.queues {
		add(&s, q.stats())
	}
	s.TXCalls = e.txCalls.Load()
	return s
}

// QueueStats returns each queue's counters, in queue order. TXCalls is
// kept only for the whole endpoint (a call may write to several queues),
// so it is zero here.
func (e *Endpoint) QueueStats() []link.Stats {
	out := make([]link.Stats, len(e.queues))
	for i, q := range e.queues {
		out[i] = q.stats()
	}
	return out
}

// OffloadStats returns what the offloads did.
func (e *Endpoint) OffloadStats() OffloadStats {
	return OffloadStats{
		TXSuperSegments: e.txSuper.Load(),
		RXSuperSegments: e.rxSuper.Load(),
		RXUSOSplit:      e.rxUSO.Load(),
		RXUSODatagrams:  e.rxUSODatagrams.Load(),
	}
}

func (q *queue) stats() link.Stats {
	return link.Stats{
		TXPackets:     q.txPackets.Load(),
		TXBytes:       q.txBytes.Load(),
		TXSyscalls:    q.txSyscalls.Load(),
		TXFull:        q.txFull.Load(),
		TXErrors:      q.txErrors.Load(),
		TXClosed:      q.txClosed.Load(),
		RXPackets:     q.rxPackets.Load(),
		RXBytes:       q.rxBytes.Load(),
		RXRounds:      q.rxRounds.Load(),
		RXBusyPolled:  q.gate.Polled(),
		RXSyscalls:    q.rxSyscalls.Load(),
		RXErrors:      q.rxErrors.Load(),
		RXBadChecksum: q.rxBadChecksum.Load(),
		RXDetached:    q.rxDetached.Load(),
		RXMalformed:   q.rxMalformed.Load(),
	}
}

// BusyPollBegin implements poll.Source.
func (e *Endpoint) BusyPollBegin() { e.gates.Begin() }

// BusyPollEnd implements poll.Source.
func (e *Endpoint) BusyPollEnd() { e.gates.End() }

// BusyPollWatchdog implements poll.Source.
func (e *Endpoint) BusyPollWatchdog() bool { return e.gates.Watchdog() }

// BusyPoll implements poll.Source: one non-blocking round of reads on each
// queue nobody else is receiving on, delivered from the caller's goroutine.
func (e *Endpoint) BusyPoll() int {
	if !e.IsAttached() {
		return 0
	}
	n := 0
	for _, q := range e.queues {
		n += q.busyPoll()
	}
	return n
}

func add(s *link.Stats, q link.Stats) {
	s.TXPackets += q.TXPackets
	s.TXBytes += q.TXBytes
	s.TXSyscalls += q.TXSyscalls
	s.TXFull += q.TXFull
	s.TXErrors += q.TXErrors
	s.TXClosed += q.TXClosed
	s.RXPackets += q.RXPackets
	s.RXBytes += q.RXBytes
	s.RXRounds += q.RXRounds
	s.RXBusyPolled += q.RXBusyPolled
	s.RXSyscalls += q.RXSyscalls
	s.RXErrors += q.RXErrors
	s.RXBadChecksum += q.RXBadChecksum
	s.RXDetached += q.RXDetached
	s.RXMalformed += q.RXMalformed
}
