package tun

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
	"github.com/ustack-dev/ustack/link/vnet"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
	_ link.Reporter      = (*Endpoint)(nil)
	_ link.Coalescer     = (*Endpoint)(nil)
	_ poll.Source        = (*Endpoint)(nil)
)

// ErrNotSupported is returned by Create, Open and OpenFD where TUN and TAP
// devices are not supported in this package (every system but Linux).
var ErrNotSupported = errors.New("tun: TUN and TAP devices are supported on Linux only")

// maxPacketSize is the largest IP packet the kernel can hand over: an IPv6
// header plus the largest payload length (65535). A TSO or GRO
// super-segment is at most 64 KiB (the device's gso_max_size) and an MTU
// at most MaxMTU, so everything fits.
const maxPacketSize = header.IPv6MinimumSize + 0xffff

// maxFrameSize is the largest frame the kernel can hand over: the largest
// packet behind an Ethernet header (a TAP device's), or alone (a TUN
// device's).
const maxFrameSize = header.EthernetMinimumSize + maxPacketSize

// rxBufSize is the receive landing buffer of one queue: a virtio-net
// header and the largest frame, plus one byte, so that a read that fills
// the buffer is recognisably truncated rather than silently accepted.
const rxBufSize = vnet.HeaderSize + maxFrameSize + 1

// Endpoint is a TUN or TAP device as a gVisor link endpoint. It is safe
// for concurrent use. A TUN endpoint carries IP packets and goes into a
// stack as it is; a TAP endpoint carries Ethernet frames and goes into a
// stack as Ethernet returns it. Open opens the device's file descriptors,
// one per queue (OpenFD adopts one);
// the first Attach with a dispatcher starts one receive goroutine per
// queue, and a queue's first write refused for lack of room starts its
// writability watcher; Close stops and joins them all and closes the
// descriptors.
//
// The Endpoint owns its descriptors and landing buffers. WritePackets
// borrows the packets it is given for the duration of the call only;
// delivered packets are the stack's.
type Endpoint struct {
	name       string // the interface name, as the kernel has it
	multiQueue bool   // the device is multi-queue (IFF_MULTI_QUEUE)
	// tap: a TAP device, whose frames start with an Ethernet header of
	// linkHdr bytes (0 on TUN); eth is the endpoint as a stack takes it
	// (nil on TUN), and mac ustack's link address (empty on TUN).
	tap      bool
	linkHdr  int
	eth      *EthernetEndpoint
	mac      atomic.Pointer[tcpip.LinkAddress]
	opts     Options  // immutable after Open
	offloads Offloads // immutable after Open
	// setOffload is the TUNSETOFFLOAD ioctl Open used (nil off Linux), for
	// SetCoalescing.
	setOffload func(fd int, flags uint) error
	gsoKind    stack.SupportedGSO
	queues     []*queue           // immutable after Open
	gates      linkutil.PollGates // the queues' busy-poll gates, in queue order

	mtu atomic.Uint32
	linkutil.Lifecycle
	rounds   linkutil.Rounds // a discipline's round hooks (NotifyRounds)
	writable atomic.Pointer[func()]
	err      atomic.Pointer[error] // the first failure (Err)

	txCalls, txSuper, rxSuper, rxUSO, rxUSODatagrams atomic.Uint64

	stop chan struct{}  // closed by Close
	wg   sync.WaitGroup // Add only at Attach or through IfOpen

	// txPool holds WritePackets' scratch (*txScratch), one per call in
	// progress.
	txPool sync.Pool
}

// counters are one queue's share of link.Stats. The RX counters are
// written by whoever receives on the queue, the TX counters by writers; a
// pad keeps the two groups off one cache line.
type counters struct {
	rxPackets, rxBytes, rxRounds, rxSyscalls         atomic.Uint64
	rxErrors, rxBadChecksum, rxDetached, rxMalformed atomic.Uint64
	_                                                cpu.CacheLinePad
	txPackets, txBytes, txSyscalls                   atomic.Uint64
	txFull, txErrors, txClosed                       atomic.Uint64
	_                                                cpu.CacheLinePad
}

func (c *counters) stats() link.Stats {
	return link.Stats{
		TXPackets:     c.txPackets.Load(),
		TXBytes:       c.txBytes.Load(),
		TXSyscalls:    c.txSyscalls.Load(),
		TXFull:        c.txFull.Load(),
		TXErrors:      c.txErrors.Load(),
		TXClosed:      c.txClosed.Load(),
		RXPackets:     c.rxPackets.Load(),
		RXBytes:       c.rxBytes.Load(),
		RXRounds:      c.rxRounds.Load(),
		RXSyscalls:    c.rxSyscalls.Load(),
		RXErrors:      c.rxErrors.Load(),
		RXBadChecksum: c.rxBadChecksum.Load(),
		RXDetached:    c.rxDetached.Load(),
		RXMalformed:   c.rxMalformed.Load(),
	}
}

// Name returns the device's interface name.
func (e *Endpoint) Name() string { return e.name }

// TAP reports whether the device is a TAP device, whose endpoint carries
// Ethernet frames and goes into a stack as Ethernet returns it.
func (e *Endpoint) TAP() bool { return e.tap }

// Ethernet returns a TAP endpoint as a stack takes it: with gVisor's
// Ethernet framing around it (an EthernetEndpoint), to give to
// stack.AddNIC in its place; always the same one. It returns nil for a
// TUN endpoint, which goes into a stack as it is.
func (e *Endpoint) Ethernet() *EthernetEndpoint { return e.eth }

// Queues returns the number of queues.
func (e *Endpoint) Queues() int { return len(e.queues) }

// MultiQueue reports whether the device is multi-queue (IFF_MULTI_QUEUE):
// Open opened it with Queues > 1, or OpenFD adopted one queue of such a
// device, whose other queues, if attached, take flows ustack never sees.
func (e *Endpoint) MultiQueue() bool { return e.multiQueue }

// Offloads returns what was negotiated with the kernel.
func (e *Endpoint) Offloads() Offloads { return e.offloads }

// Err returns nil while the device works, and afterwards the failure
// that stopped the endpoint: once the device is gone (deleted from
// outside, or its namespace destroyed), an error matching
// link.ErrDeviceGone; or, for a TAP endpoint attached to a stack without
// its Ethernet framing (see Attach), an error that says so. The endpoint
// then receives nothing and refuses every write; Close it. It is safe to
// call at any time.
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

// failGone records that the device is gone, which cause (the failed
// system call) showed.
func (e *Endpoint) failGone(cause error) {
	e.fail(linkutil.DeviceGone(fmt.Sprintf("tun %s", e.name), cause))
}

// MTU implements stack.LinkEndpoint: the largest packet, or on a TAP
// device the largest frame (the device's MTU and an Ethernet header),
// which gVisor's Ethernet endpoint around it turns back into the largest
// packet.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. It changes the MTU gVisor uses,
// clamped to MinMTU..MaxMTU (plus the Ethernet header on a TAP device,
// as MTU), not the device's: the device lives in the namespace Open ran
// in, which the caller may no longer be in.
func (e *Endpoint) SetMTU(mtu uint32) {
	h := uint32(e.linkHdr)
	e.mtu.Store(min(max(mtu, MinMTU+h), MaxMTU+h))
}

// MaxHeaderLength implements stack.LinkEndpoint: none of its own (on a
// TAP device, gVisor's Ethernet endpoint around it adds its header).
func (*Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: ustack's MAC on a TAP device
// (Options.MAC), which gVisor's Ethernet endpoint around it reports; raw
// IP has none.
func (e *Endpoint) LinkAddress() tcpip.LinkAddress {
	if p := e.mac.Load(); p != nil {
		return *p
	}
	return ""
}

// SetLinkAddress implements stack.LinkEndpoint: it changes ustack's MAC
// on a TAP device; raw IP has no link address, so on a TUN device it does
// nothing.
func (e *Endpoint) SetLinkAddress(addr tcpip.LinkAddress) {
	if e.tap {
		e.mac.Store(&addr)
	}
}

// Capabilities implements stack.LinkEndpoint. With the virtio-net header
// or GRO the endpoint claims RX checksum offload: it checks every received
// packet itself (the kernel's verdict, vnet.Inspect or vnet.CheckIP)
// before gVisor sees it, and a segment GRO merged no longer carries a
// checksum that verifies. It never claims TX checksum offload, so gVisor
// computes the checksums of every packet that is not a GSO super-segment.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	if e.offloads.VNetHeader || !e.opts.NoGRO {
		return stack.CapabilityRXChecksumOffload
	}
	return stack.CapabilityNone
}

// verifyRX reports whether the endpoint checks the checksums of packets
// that arrive without a virtio-net header: it claims RX checksum offload
// for GRO only.
func (e *Endpoint) verifyRX() bool { return !e.offloads.VNetHeader && !e.opts.NoGRO }

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
// negotiated TSO, gVisor's software GSO otherwise, and none with
// Options.NoSoftwareGSO (gVisor then builds every MTU-sized segment on its
// own).
func (e *Endpoint) SupportedGSO() stack.SupportedGSO { return e.gsoKind }

// ARPHardwareType implements stack.LinkEndpoint: none of its own (gVisor's
// Ethernet endpoint around a TAP endpoint says Ethernet).
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: raw IP adds none (on a TAP
// device, gVisor's Ethernet endpoint around it adds the Ethernet header).
func (*Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: raw IP has none to parse (a
// TAP device's receive path parses the Ethernet header itself, before GRO).
func (*Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// errNotEthernet is the failure of a TAP endpoint attached to a stack
// without its Ethernet framing.
var errNotEthernet = errors.New("a TAP endpoint was attached to a stack directly, without its Ethernet framing: give the stack its Ethernet() instead")

// Attach implements stack.LinkEndpoint. The first Attach with a dispatcher
// starts one receive goroutine per queue. Attach(nil) detaches at once
// without waiting: gVisor calls it holding the stack's lock, which a
// delivery in progress may be waiting for. Packets that arrive while
// detached are read and dropped, and counted in RXDetached.
//
// A TAP endpoint is attached by its Ethernet endpoint (Ethernet) only:
// attached to anything else, it would hand a stack frames it cannot parse
// and write packets with no Ethernet header, so it stays detached instead,
// and Err says why.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	if e.tap && d != nil && d != stack.NetworkDispatcher(e.eth) {
		e.fail(fmt.Errorf("tun %s: %w", e.name, errNotEthernet))
		return
	}
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
// created it (or OpenFD's was its last descriptor) and no other process
// holds it open, and joins every goroutine.
// Writes after Close are refused and counted in TXClosed. Close is
// idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.BeginClose(); !first {
		return
	}
	close(e.stop)
	for _, q := range e.queues {
		q.close()
	}
	e.wg.Wait()
	e.closeCaches()
}

// CacheStats returns what the queues' landing-buffer caches counted (all
// zero with NoCache).
func (e *Endpoint) CacheStats() cache.Stats {
	var s cache.Stats
	for _, q := range e.queues {
		q.addCacheStats(&s)
	}
	return s
}

// NotifyRounds implements sched.RoundNotifier: a discipline's begin and
// end hooks wrap each receive round that delivers a packet (after GRO's
// flush), so what the round's delivery writes (ACKs and replies sent
// inline, forwarded packets) leaves in one flush at its end.
func (e *Endpoint) NotifyRounds(begin, end func()) { e.rounds.Set(begin, end) }

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

// notifyWritable calls the registered writability callback, if any.
func (e *Endpoint) notifyWritable() {
	if f := e.writable.Load(); f != nil {
		(*f)()
	}
}

// SetCoalescing implements link.Coalescer: with on false, no queue's GRO
// merges segments or thins ACKs from its next receive round on, and the
// kernel is asked for no offloads (TUNSETOFFLOAD 0), so that it hands
// over packets as they would cross a wire: segmented, with full
// checksums, not the TCP super-segments and partial checksums it
// otherwise sends for speed, which a router could only drop. With on true
// the offloads Open negotiated (Offloads) are asked for again. A device
// whose offloads were Inherited keeps them: the kernel refused to change
// them once already.
func (e *Endpoint) SetCoalescing(on bool) {
	for _, q := range e.queues {
		q.gro.SetCoalescing(on)
	}
	e.setKernelOffloads(on)
}

// LinkStats implements link.Reporter: the sum over all queues.
func (e *Endpoint) LinkStats() link.Stats {
	var s link.Stats
	for _, q := range e.queues {
		s.Add(q.stats())
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

// stats returns the queue's counters.
func (q *queue) stats() link.Stats {
	s := q.counters.stats()
	s.RXBusyPolled = q.gate.Polled()
	s.RXThinnedACKs = q.gro.ThinnedACKs()
	return s
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
