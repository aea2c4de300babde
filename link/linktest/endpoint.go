package linktest

import (
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Featured)(nil)
	_ link.Reporter      = (*Featured)(nil)
	_ link.Coalescer     = (*Featured)(nil)
	_ poll.Source        = (*Featured)(nil)
	_ writableNotifier   = (*Featured)(nil)
	_ writableNotifier   = NotifyingWriter{}
	_ roundNotifier      = (*Featured)(nil)
	_ link.CacheReporter = (*Featured)(nil)
	_ link.ErrReporter   = (*Featured)(nil)
)

// writableNotifier is sched.WritableNotifier, which this package cannot
// import: sched's own tests import it.
type writableNotifier interface{ NotifyWritable(f func()) }

// roundNotifier is sched.RoundNotifier, for the same reason.
type roundNotifier interface{ NotifyRounds(begin, end func()) }

// DefaultMTU is an Endpoint's MTU until SetMTU: Ethernet's.
const DefaultMTU = 1500

// Endpoint is a raw-IP stack.LinkEndpoint (no link header, like TUN) for
// tests: what the stack writes goes to its Writer, and Inject delivers a
// packet as if the wire had brought it. It implements no optional
// interface, which makes it the endpoint a wrapper must cope with when
// features are missing. It is safe for concurrent use.
type Endpoint struct {
	*Writer
	// Caps are the capabilities it claims; set them before attaching.
	Caps stack.LinkEndpointCapabilities

	mtu        atomic.Uint32
	dispatcher atomic.Pointer[stack.NetworkDispatcher]
	mu         sync.Mutex
	closed     bool
	onClose    func()
}

// NewEndpoint returns an Endpoint writing to w (a new Writer if nil).
func NewEndpoint(w *Writer) *Endpoint {
	if w == nil {
		w = &Writer{}
	}
	e := &Endpoint{Writer: w}
	e.mtu.Store(DefaultMTU)
	return e
}

// Inject delivers a fresh IPv4-numbered packet with a copy of data to the
// attached dispatcher and reports whether one was attached.
func (e *Endpoint) Inject(data []byte) bool {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), data...))})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	defer pkt.DecRef()
	return e.InjectPacket(header.IPv4ProtocolNumber, pkt)
}

// InjectPacket delivers pkt, a packet the test built (with its link
// header already consumed, as an Ethernet endpoint's ParseHeader leaves
// it, say), to the attached dispatcher as proto, and reports whether one
// was attached. The caller keeps its reference.
func (e *Endpoint) InjectPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) bool {
	d := e.dispatcher.Load()
	if d == nil || *d == nil {
		return false
	}
	(*d).DeliverNetworkPacket(proto, pkt)
	return true
}

// Closed reports whether Close was called.
func (e *Endpoint) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint.
func (e *Endpoint) SetMTU(mtu uint32) { e.mtu.Store(mtu) }

// MaxHeaderLength implements stack.LinkEndpoint: raw IP has no link header.
func (*Endpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: raw IP has no link address.
func (*Endpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint; it does nothing.
func (*Endpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint: Caps.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities { return e.Caps }

// Attach implements stack.LinkEndpoint; nil detaches.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.dispatcher.Store(nil)
		return
	}
	e.dispatcher.Store(&d)
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool { return e.dispatcher.Load() != nil }

// Wait implements stack.LinkEndpoint: there is no goroutine to wait for.
func (*Endpoint) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (*Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: raw IP adds none.
func (*Endpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: raw IP has none to parse.
func (*Endpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// SetOnCloseAction implements stack.LinkEndpoint.
func (e *Endpoint) SetOnCloseAction(f func()) {
	e.mu.Lock()
	e.onClose = f
	e.mu.Unlock()
}

// Close implements stack.LinkEndpoint: it runs the on-close action once,
// detaches, and makes later writes fail with ErrClosedForSend. Idempotent.
func (e *Endpoint) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	f := e.onClose
	e.mu.Unlock()
	e.dispatcher.Store(nil)
	if f != nil {
		f()
	}
}

// WritePackets implements stack.LinkWriter: the Writer's, or
// ErrClosedForSend after Close.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	if e.Closed() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	return e.Writer.WritePackets(pkts)
}

// Featured is an Endpoint with every optional interface that link/doc.go
// lists (those ustack or gVisor finds on a link endpoint by type
// assertion): poll.Source, sched.WritableNotifier, sched.RoundNotifier,
// stack.GSOEndpoint, link.Coalescer, link.Reporter, link.CacheReporter
// and link.ErrReporter. Each returns the value in the matching field and
// counts its calls (Calls), so a test can check that a wrapper passes
// each one through (link/internal/optional checks that it has them all).
// Set the fields before use; it is then safe for concurrent use.
type Featured struct {
	*Endpoint
	// Stats, Cache, GSOMax, GSO, Error and PollRound are what LinkStats,
	// CacheStats, GSOMaxSize, SupportedGSO, Err and BusyPoll return.
	Stats     link.Stats
	Cache     cache.Stats
	GSOMax    uint32
	GSO       stack.SupportedGSO
	Error     error
	PollRound int
	// Coalescing is what SetCoalescing last set; true until then.
	Coalescing atomic.Bool

	callsMu    sync.Mutex
	calls      map[string]int
	writable   func()
	begin, end func() // NotifyRounds's hooks
}

// NewFeatured returns a Featured endpoint writing to w (a new Writer if
// nil).
func NewFeatured(w *Writer) *Featured {
	f := &Featured{Endpoint: NewEndpoint(w), calls: map[string]int{}}
	f.Coalescing.Store(true)
	return f
}

func (f *Featured) called(method string) {
	f.callsMu.Lock()
	f.calls[method]++
	f.callsMu.Unlock()
}

// Calls returns how many times the named method was called.
func (f *Featured) Calls(method string) int {
	f.callsMu.Lock()
	defer f.callsMu.Unlock()
	return f.calls[method]
}

// Writable calls the callback NotifyWritable registered, if any, and
// reports whether there was one.
func (f *Featured) Writable() bool {
	f.callsMu.Lock()
	w := f.writable
	f.callsMu.Unlock()
	if w != nil {
		w()
	}
	return w != nil
}

// Round runs one receive round as a link that delivers in rounds would:
// the hooks NotifyRounds registered, if any, around deliver. It reports
// whether there were hooks.
func (f *Featured) Round(deliver func()) bool {
	f.callsMu.Lock()
	begin, end := f.begin, f.end
	f.callsMu.Unlock()
	if begin != nil {
		begin()
	}
	deliver()
	if end != nil {
		end()
	}
	return begin != nil
}

// NotifyRounds implements sched.RoundNotifier: Round calls begin and end.
func (f *Featured) NotifyRounds(begin, end func()) {
	f.called("NotifyRounds")
	f.callsMu.Lock()
	f.begin, f.end = begin, end
	f.callsMu.Unlock()
}

// BusyPollBegin implements poll.Source.
func (f *Featured) BusyPollBegin() { f.called("BusyPollBegin") }

// BusyPoll implements poll.Source: PollRound.
func (f *Featured) BusyPoll() int { f.called("BusyPoll"); return f.PollRound }

// BusyPollEnd implements poll.Source.
func (f *Featured) BusyPollEnd() { f.called("BusyPollEnd") }

// BusyPollWatchdog implements poll.Source: true.
func (f *Featured) BusyPollWatchdog() bool { f.called("BusyPollWatchdog"); return true }

// NotifyWritable implements sched.WritableNotifier: Writable calls f.
func (f *Featured) NotifyWritable(w func()) {
	f.called("NotifyWritable")
	f.callsMu.Lock()
	f.writable = w
	f.callsMu.Unlock()
}

// LinkStats implements link.Reporter: Stats.
func (f *Featured) LinkStats() link.Stats { f.called("LinkStats"); return f.Stats }

// SetCoalescing implements link.Coalescer: it sets Coalescing.
func (f *Featured) SetCoalescing(on bool) { f.called("SetCoalescing"); f.Coalescing.Store(on) }

// CacheStats implements link.CacheReporter: Cache.
func (f *Featured) CacheStats() cache.Stats { f.called("CacheStats"); return f.Cache }

// GSOMaxSize implements stack.GSOEndpoint: GSOMax.
func (f *Featured) GSOMaxSize() uint32 { f.called("GSOMaxSize"); return f.GSOMax }

// SupportedGSO implements stack.GSOEndpoint: GSO.
func (f *Featured) SupportedGSO() stack.SupportedGSO { f.called("SupportedGSO"); return f.GSO }

// Err implements link.ErrReporter: Error.
func (f *Featured) Err() error { f.called("Err"); return f.Error }
