package afpacket

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/cpu"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ poll.Source        = (*Endpoint)(nil)
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
	_ link.Reporter      = (*Endpoint)(nil)
	_ link.Coalescer     = (*Endpoint)(nil)
	_ link.CacheReporter = (*Endpoint)(nil)
	_ link.ErrReporter   = (*Endpoint)(nil)
)

// ErrNotSupported is returned by New where AF_PACKET does not exist (any
// OS but Linux).
var ErrNotSupported = errors.New("afpacket: AF_PACKET sockets exist on Linux only")

// GSOMaxSize is the largest TCP super-segment the endpoint accepts with the
// virtio-net header on: 64 KiB, gVisor's own limit, the kernel's default
// gso_max_size and the IPv4 total length limit.
const GSOMaxSize = stack.GVisorGSOMaxSize

// Endpoint is an AF_PACKET link endpoint bound to one interface. It is safe
// for concurrent use. New opens its sockets, one per queue; the first
// Attach with a dispatcher starts one receive goroutine per queue, and a
// queue's first write refused for lack of room starts its writability
// watcher; Close stops and joins them all and closes the sockets.
//
// The Endpoint owns its sockets and landing buffers. WritePackets borrows
// the packets it is given for the duration of the call only; delivered
// packets are the stack's.
type Endpoint struct {
	opts    Options // normalized; immutable after New
	ifname  string
	ifindex int
	vnetHdr bool    // PACKET_VNET_HDR is on
	rxCheck rxCheck // who checks received checksums

	mtu  atomic.Uint32
	addr atomic.Pointer[tcpip.LinkAddress]

	queues []*queue           // immutable after New
	gates  linkutil.PollGates // the queues' busy-poll gates, in queue order

	linkutil.Lifecycle
	rounds   linkutil.Rounds // a discipline's round hooks (NotifyRounds)
	writable atomic.Pointer[func()]
	err      atomic.Pointer[error] // the first failure (Err)
	closing  atomic.Bool           // Close has begun: refuse writes

	txCalls, txClosed atomic.Uint64

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // Add only at Attach or through IfOpen

	// TX scratch: with the cache on, txCache, owned by whoever holds txMu;
	// a writer that finds it taken, or any writer with the cache off,
	// uses txPool.
	txMu    sync.Mutex
	txCache *cache.Cache[*txScratch]
	txPool  sync.Pool // of *txScratch
}

// counters are one queue's share of link.Stats. The RX counters are
// written by whoever receives on the queue, the TX counters by writers; a
// pad keeps the two groups off one cache line.
type counters struct {
	rxPackets, rxBytes, rxRounds, rxSyscalls atomic.Uint64
	rxErrors, rxBadChecksum, rxDetached      atomic.Uint64
	rxMalformed                              atomic.Uint64
	_                                        cpu.CacheLinePad
	txPackets, txBytes, txSyscalls           atomic.Uint64
	txFull, txErrors                         atomic.Uint64
	_                                        cpu.CacheLinePad
}

func (c *counters) stats() link.Stats {
	return link.Stats{
		TXPackets:     c.txPackets.Load(),
		TXBytes:       c.txBytes.Load(),
		TXFull:        c.txFull.Load(),
		TXErrors:      c.txErrors.Load(),
		TXSyscalls:    c.txSyscalls.Load(),
		RXPackets:     c.rxPackets.Load(),
		RXBytes:       c.rxBytes.Load(),
		RXRounds:      c.rxRounds.Load(),
		RXDetached:    c.rxDetached.Load(),
		RXMalformed:   c.rxMalformed.Load(),
		RXBadChecksum: c.rxBadChecksum.Load(),
		RXErrors:      c.rxErrors.Load(),
		RXSyscalls:    c.rxSyscalls.Load(),
	}
}

// Name returns the name of the interface the endpoint is bound to.
func (e *Endpoint) Name() string { return e.ifname }

// Options returns the options in effect, defaults filled in.
func (e *Endpoint) Options() Options { return e.opts }

// MTU implements stack.LinkEndpoint: the interface's MTU when New ran (the
// largest IP packet, Ethernet header not included), or what SetMTU set.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. It changes what the stack sends,
// not the interface: a larger MTU than the interface's makes the kernel
// refuse the frames (counted in TXErrors).
func (e *Endpoint) SetMTU(mtu uint32) { e.mtu.Store(mtu) }

// MaxHeaderLength implements stack.LinkEndpoint: an Ethernet header.
func (*Endpoint) MaxHeaderLength() uint16 { return linkHdrLen }

// LinkAddress implements stack.LinkEndpoint: the interface's MAC address,
// unless SetLinkAddress changed it.
func (e *Endpoint) LinkAddress() tcpip.LinkAddress { return *e.addr.Load() }

// SetLinkAddress implements stack.LinkEndpoint. It changes the source
// address of frames the stack builds, not the interface's address, so
// frames sent to the new address reach the endpoint only if the interface
// accepts them (promiscuous mode, say).
func (e *Endpoint) SetLinkAddress(addr tcpip.LinkAddress) { e.addr.Store(&addr) }

// Capabilities implements stack.LinkEndpoint. The stack resolves link
// addresses (ARP, NDP). With the virtio-net header on, or GRO, the
// endpoint claims RX checksum offload: the kernel's verdict travels with
// each frame or a veth frame's partial checksum, which gVisor would take
// for a wrong one, is trusted; other frames are verified by the endpoint
// (and a segment GRO merged no longer carries a checksum that verifies).
// TX checksum offload is not claimed: gVisor computes the checksums of
// everything but TCP super-segments (whose partial checksum the kernel
// completes) itself, so no frame leaves with a partial checksum that a
// device without offload would send on unfinished.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	c := stack.CapabilityResolutionRequired
	if e.rxCheck != checkStack {
		c |= stack.CapabilityRXChecksumOffload
	}
	return c
}

// GSOMaxSize implements stack.GSOEndpoint: GSOMaxSize, unless
// Options.NoSoftwareGSO turned segmentation off without the virtio-net
// header (0).
func (e *Endpoint) GSOMaxSize() uint32 {
	if e.SupportedGSO() != stack.GSONotSupported {
		return GSOMaxSize
	}
	return 0
}

// SupportedGSO implements stack.GSOEndpoint: host GSO, so gVisor's TCP
// hands the endpoint super-segments with a partial checksum. With the
// virtio-net header on the kernel segments them (or a veth carries them
// whole). Without it the endpoint cuts each into MTU-sized frames itself,
// with complete checksums, and sends them together in one sendmmsg, where
// gVisor's software GSO would hand it one frame per call (and so one
// system call per frame); unless Options.NoSoftwareGSO, with which gVisor's
// TCP builds and checksums every MTU-sized segment on its own.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if !e.vnetHdr && e.opts.NoSoftwareGSO {
		return stack.GSONotSupported
	}
	return stack.HostGSOSupported
}

// ARPHardwareType implements stack.LinkEndpoint: Ethernet.
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }

// AddHeader implements stack.LinkEndpoint: it pushes an Ethernet header
// addressed from pkt.EgressRoute, with pkt's network protocol as its type.
func (*Endpoint) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(linkHdrLen))
	eth.Encode(&header.EthernetFields{
		SrcAddr: pkt.EgressRoute.LocalLinkAddress,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

// ParseHeader implements stack.LinkEndpoint: it consumes the Ethernet
// header into pkt's link header and sets pkt's network protocol from its
// type. It reports false for a packet shorter than the header.
func (*Endpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	b, ok := pkt.LinkHeader().Consume(linkHdrLen)
	if !ok {
		return false
	}
	pkt.NetworkProtocolNumber = header.Ethernet(b).Type()
	return true
}

// Attach implements stack.LinkEndpoint. The first Attach with a dispatcher
// starts the receive goroutines; until then frames wait in the sockets'
// receive buffers (the kernel drops what does not fit). Attach(nil)
// detaches at once without waiting: gVisor calls it holding the stack's
// lock, which a delivery in progress may be waiting for. Frames that
// arrive while detached are dropped and counted in RXDetached.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.AttachAndStart(d, func() {
		for _, q := range e.queues {
			e.wg.Add(1)
			go q.rxLoop()
		}
	})
}

// BusyPollBegin implements poll.Source.
func (e *Endpoint) BusyPollBegin() { e.gates.Begin() }

// BusyPollEnd implements poll.Source.
func (e *Endpoint) BusyPollEnd() { e.gates.End() }

// BusyPollWatchdog implements poll.Source.
func (e *Endpoint) BusyPollWatchdog() bool { return e.gates.Watchdog() }

// BusyPoll implements poll.Source: one non-blocking recvmmsg round on each
// queue nobody else is receiving on, delivered from the caller's goroutine.
func (e *Endpoint) BusyPoll() int {
	if !e.IsAttached() || e.closing.Load() {
		return 0
	}
	n := 0
	for _, q := range e.queues {
		n += q.busyPoll()
	}
	return n
}

// Close implements stack.LinkEndpoint. It runs the on-close action (which
// removes the NIC from its stack), refuses further writes, closes the
// sockets (which wakes every parked goroutine; frames still in them are
// dropped by the kernel) and joins every goroutine the endpoint started.
// It is idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.BeginClose(); !first {
		return
	}
	e.closing.Store(true)
	close(e.stop)
	for _, q := range e.queues {
		q.close()
	}
	e.wg.Wait()
	e.closeCaches()
}

// NotifyRounds implements sched.RoundNotifier: a discipline's begin and
// end hooks wrap each receive round that delivers a packet (after GRO's
// flush), so what the round's delivery writes (ACKs and replies sent
// inline, forwarded packets) leaves in one flush at its end.
func (e *Endpoint) NotifyRounds(begin, end func()) { e.rounds.Set(begin, end) }

// NotifyWritable implements sched.WritableNotifier: after WritePackets
// refused packets because a socket was full, f is called, from the
// endpoint's watcher goroutine with no lock held, once that socket can
// take more. A later call replaces f; nil stops the calls.
func (e *Endpoint) NotifyWritable(f func()) {
	if f == nil {
		e.writable.Store(nil)
		return
	}
	e.writable.Store(&f)
}

// notifyWritable calls the registered writability callback, if any.
func (e *Endpoint) notifyWritable() {
	if f := e.writable.Load(); f != nil {
		(*f)()
	}
}

// Err returns nil while the interface works, and afterwards the failure
// that stopped the endpoint: once the interface is gone (deleted, or its
// namespace destroyed), an error matching link.ErrDeviceGone. The endpoint
// then receives nothing and refuses every write; Close it. An interface
// that is only down is not an error: frames sent meanwhile are dropped
// (counted in TXErrors) and receiving resumes when it comes back up. It is
// safe to call at any time.
func (e *Endpoint) Err() error {
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records the failure err; the first one wins.
func (e *Endpoint) fail(err error) {
	e.err.CompareAndSwap(nil, &err)
}

// failGone records that the interface is gone, which cause (the failed
// system call) showed.
func (e *Endpoint) failGone(cause error) {
	e.fail(linkutil.DeviceGone(fmt.Sprintf("afpacket: interface %q (index %d)", e.ifname, e.ifindex), cause))
}

// CacheStats returns what the endpoint's buffer caches counted, TX scratch
// and every queue's landing batch together (all zero with NoCache).
func (e *Endpoint) CacheStats() cache.Stats {
	var s cache.Stats
	if e.txCache != nil {
		s.Add(e.txCache.Stats())
	}
	for _, q := range e.queues {
		q.addCacheStats(&s)
	}
	return s
}

// SetCoalescing implements link.Coalescer: with on false, no queue's GRO
// merges segments or thins ACKs from its next receive round on. Segments
// the kernel hands over already merged (with the virtio-net header, or a
// peer's TSO frames) still come as they are.
func (e *Endpoint) SetCoalescing(on bool) {
	for _, q := range e.queues {
		q.gro.SetCoalescing(on)
	}
}

// LinkStats implements link.Reporter: the counters of all queues together. Beyond the
// field documentation of link.Stats: TXPackets and TXBytes count frames
// sent, so a TCP super-segment the endpoint cuts into frames itself
// (without the virtio-net header) counts as its frames; RXMalformed also counts frames not
// addressed to this host (PACKET_OTHERHOST: a veth passes them up, as does
// a device in promiscuous mode) and
// frames of EtherTypes other than IPv4, IPv6 and ARP; frames the endpoint
// sent itself are never read back (PACKET_IGNORE_OUTGOING) and not counted.
func (e *Endpoint) LinkStats() link.Stats {
	var s link.Stats
	for _, q := range e.queues {
		s.Add(q.stats())
	}
	s.TXCalls = e.txCalls.Load()
	s.TXClosed = e.txClosed.Load()
	return s
}

// QueueStats returns each queue's counters, in queue order; TXCalls and
// TXClosed, which belong to the endpoint as a whole, are zero in them.
func (e *Endpoint) QueueStats() []link.Stats {
	out := make([]link.Stats, len(e.queues))
	for i, q := range e.queues {
		out[i] = q.stats()
	}
	return out
}

// stats returns the queue's counters.
func (q *queue) stats() link.Stats {
	s := q.counters.stats()
	s.RXBusyPolled = q.gate.Polled()
	s.RXThinnedACKs = q.gro.ThinnedACKs()
	return s
}
