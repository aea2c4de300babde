package pktio

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

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
)

// ErrClosed is returned by Read and Write once the endpoint is closed. It
// wraps os.ErrClosed, which is what wireguard-go's device looks for to
// stop its TUN reader quietly.
var ErrClosed = fmt.Errorf("pktio: endpoint closed: %w", os.ErrClosed)

// Endpoint is a link endpoint fed and drained by user code through Write
// and Read. It is safe for concurrent use: any number of goroutines may
// Write and Read (Reads take turns). Its receive goroutine starts on the
// first Attach with a dispatcher and is stopped and joined by Close.
type Endpoint struct {
	opts Options // immutable after New
	mtu  atomic.Uint32

	linkutil.Lifecycle
	rounds linkutil.Rounds // a discipline's round hooks (NotifyRounds)

	stop   chan struct{}
	done   chan struct{} // closed when rxLoop returns
	closed atomic.Bool

	tx txQueue // the stack writes, Read drains

	// readMu lets one Read run at a time; it guards the fields below it.
	readMu   sync.Mutex
	taken    []*stack.PacketBuffer // scratch: what one Read took from tx
	cuts     []cut                 // scratch: how each packet of taken goes out
	carry    *stack.PacketBuffer   // a super-segment Read has cut only in part
	carryCut cut                   // how carry is cut
	carrySeg int                   // the next segment of carry to hand out

	rx rxQueue // Write fills when delivery is busy, receive rounds drain
	// gate.Owner is held by whoever runs a receive round (Write inline,
	// the receive goroutine or a busy-polling reader); it guards gro,
	// batch and rxShut.
	gate   linkutil.PollGate
	gro    linkutil.GRO
	batch  []*stack.PacketBuffer
	rxShut bool // Close has taken the receive side back
	kick   chan struct{}

	rxPackets, rxBytes, rxRounds, rxInline atomic.Uint64
	rxDetached, rxMalformed, rxClosed      atomic.Uint64
	rxErrors, rxSuper, rxWaits, rxBadCsum  atomic.Uint64
	readCalls, readPackets, readSplit      atomic.Uint64
	txTooBig                               atomic.Uint64
}

// New returns an endpoint with the given options (nil means the
// defaults). Hand it to a stack (stack.Stack.AddNIC), which then owns it
// and closes it.
func New(opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	e := &Endpoint{
		opts:  o,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		taken: make([]*stack.PacketBuffer, o.QueueLen),
		cuts:  make([]cut, o.QueueLen),
		batch: make([]*stack.PacketBuffer, o.BatchSize),
		kick:  make(chan struct{}, 1),
	}
	e.mtu.Store(o.MTU)
	e.tx.init(o.QueueLen)
	e.rx.init(o.QueueLen)
	e.gro.Init(!o.NoGRO)
	e.gro.SetRounds(&e.rounds)
	return e, nil
}

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint. Values outside MinMTU..MaxMTU are
// clamped into it.
func (e *Endpoint) SetMTU(mtu uint32) { e.mtu.Store(min(max(mtu, MinMTU), MaxMTU)) }

// MaxHeaderLength implements stack.LinkEndpoint: raw IP has no link header.
func (*Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has no link address.
func (*Endpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint; raw IP has no link
// address, so it does nothing.
func (*Endpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint. The endpoint verifies the
// checksums of every written packet itself, before GRO (vnet.CheckIP, or
// vnet.Inspect behind a virtio-net header), and claims RX checksum
// offload: gVisor's NIC overwrites a packet's RXChecksumValidated with
// that capability, and a segment GRO merged no longer carries a
// checksum that verifies. It claims no TX offload: every packet Read
// hands out carries complete checksums (unless VNetHeader asks for
// partial ones).
func (*Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *Endpoint) GSOMaxSize() uint32 {
	if e.opts.NoGSO {
		return 0
	}
	return GSOMaxSize
}

// SupportedGSO implements stack.GSOEndpoint: TCP hands the endpoint whole
// super-segments, as to a device with TSO, and Read cuts them.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.opts.NoGSO {
		return stack.GSONotSupported
	}
	return stack.HostGSOSupported
}

// ARPHardwareType implements stack.LinkEndpoint.
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: raw IP adds none.
func (*Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: raw IP has none to parse.
func (*Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// Attach implements stack.LinkEndpoint. The first Attach with a
// dispatcher starts the receive goroutine; Attach(nil) detaches at once,
// and packets written while detached are dropped and counted in
// RXDetached.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.AttachAndStart(d, func() { go e.rxLoop() })
}

// Close implements stack.LinkEndpoint. It removes the NIC from its stack,
// wakes every blocked Read and Write (they return ErrClosed), stops and
// joins the receive goroutine, and releases every packet still queued in
// either direction: those towards the stack are counted in RXClosed,
// those the consumer never read in TXClosed. Close is idempotent.
func (e *Endpoint) Close() {
	first, started := e.BeginClose()
	if !first {
		return
	}
	e.closed.Store(true)
	close(e.stop)
	e.rx.shut()
	e.tx.shut()
	if started {
		<-e.done
	}
	e.gate.Owner.Lock()
	e.rxShut = true
	e.rxClosed.Add(uint64(e.rx.release()))
	e.gate.Owner.Unlock()
	e.readMu.Lock()
	if e.carry != nil {
		e.carry.DecRef()
		e.carry = nil
		e.tx.addClosed(1)
	}
	e.readMu.Unlock()
	e.tx.addClosed(e.tx.release())
}

// Counters are what the endpoint counts beyond link.Stats: the consumer's
// side of the queues and the offloads.
type Counters struct {
	// ReadCalls and ReadPackets count Read calls that returned packets,
	// and the packets they returned (segments of a cut super-segment
	// each count).
	ReadCalls, ReadPackets uint64
	// ReadSplit counts super-segments Read cut to the MTU.
	ReadSplit uint64
	// ReadTooBig counts packets dropped because the consumer's buffer
	// could not hold them (also in link.Stats.TXErrors).
	ReadTooBig uint64
	// RXInline counts Write calls delivered in the writer's goroutine
	// (the stack's receive side was idle); the rest were queued for the
	// receive goroutine. RXWaits counts Writes that found the queue
	// towards the stack full and waited for room.
	RXInline, RXWaits uint64
	// RXSuper counts super-packets written behind a virtio-net header
	// with a TCP GSO type (VNetHeader).
	RXSuper uint64
}

// Counters returns the endpoint's own counters. It is safe to call at any
// time.
func (e *Endpoint) Counters() Counters {
	return Counters{
		ReadCalls:   e.readCalls.Load(),
		ReadPackets: e.readPackets.Load(),
		ReadSplit:   e.readSplit.Load(),
		ReadTooBig:  e.txTooBig.Load(),
		RXInline:    e.rxInline.Load(),
		RXWaits:     e.rxWaits.Load(),
		RXSuper:     e.rxSuper.Load(),
	}
}

// SetCoalescing implements link.Coalescer: with on false, GRO neither
// merges segments nor thins ACKs from the next receive round on. Packets
// written whole with a virtio-net header (VNetHeader) still come whole.
func (e *Endpoint) SetCoalescing(on bool) { e.gro.SetCoalescing(on) }

// LinkStats implements link.Reporter. TX is the direction towards the
// consumer (the stack transmits, Read takes), RX the one towards the
// stack (Write gives, the stack receives).
func (e *Endpoint) LinkStats() link.Stats {
	q := &e.tx
	q.mu.Lock()
	s := link.Stats{
		TXPackets: q.packets,
		TXBytes:   q.bytes,
		TXCalls:   q.calls,
		TXFull:    q.full,
		TXClosed:  q.closedCount,
	}
	q.mu.Unlock()
	s.TXErrors = e.txTooBig.Load()
	s.RXPackets = e.rxPackets.Load()
	s.RXBytes = e.rxBytes.Load()
	s.RXRounds = e.rxRounds.Load()
	s.RXBusyPolled = e.gate.Polled()
	s.RXThinnedACKs = e.gro.ThinnedACKs()
	s.RXDetached = e.rxDetached.Load()
	s.RXMalformed = e.rxMalformed.Load()
	s.RXClosed = e.rxClosed.Load()
	s.RXErrors = e.rxErrors.Load()
	s.RXBadChecksum = e.rxBadCsum.Load()
	return s
}
