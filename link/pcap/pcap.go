package pcap

import (
	"errors"
	"fmt"
	"io"
	"time"

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
	_ link.CacheReporter     = (*Endpoint)(nil)
	_ link.ErrReporter       = (*Endpoint)(nil)
	_ poll.Source            = (*Endpoint)(nil)
	_ sched.WritableNotifier = (*Endpoint)(nil)
	_ sched.RoundNotifier    = (*Endpoint)(nil)
)

const (
	// DefaultSnapLen is the most bytes of a packet a record keeps: 65535,
	// the longest IPv4 packet, so that every packet of an MTU-sized link
	// is captured whole, and only a super-segment longer than an IPv4
	// packet is cut (its record still says how long it was).
	DefaultSnapLen = 65535
	// MaxSnapLen is the largest snap length: libpcap's MAXIMUM_SNAPLEN
	// (262144); readers built on libpcap may refuse a file that declares
	// more.
	MaxSnapLen = 262144
	// DefaultBufferSize bounds the records waiting for the writer: 2 MiB,
	// libpcap's default capture buffer on Linux (tcpdump -B), room for
	// about 1400 full Ethernet frames or 30 of the largest super-segments.
	DefaultBufferSize = 2 << 20
)

// Options configures a capture. A nil Options, or a zero field, means the
// field's default.
type Options struct {
	// SnapLen is the most bytes of each packet captured, from 1 to
	// MaxSnapLen; a longer packet is cut, its record still saying how long
	// it was (Counts.Truncated).
	SnapLen int
	// BufferSize is the most bytes of records (16 bytes of header each,
	// plus the captured bytes) that wait for the writer; a packet whose
	// record does not fit is left out of the capture (Counts.Dropped). It
	// must hold at least one record of SnapLen bytes. The capture holds up
	// to twice this much: one buffer filling while the other is written.
	BufferSize int
}

// Counts are what a capture did. Every packet that crossed the link after
// New is in exactly one of Packets, Dropped and Lost once Close returned;
// before, the rest are still buffered.
type Counts struct {
	// Packets counts the records written; Bytes the bytes written, the
	// file header included.
	Packets, Bytes uint64
	// Truncated counts the records among Packets cut to the snap length.
	Truncated uint64
	// Dropped counts packets left out because the buffer was full (the
	// writer fell behind) or the capture was closing.
	Dropped uint64
	// Lost counts packets whose records the writer failed to take, and
	// every packet after that failure (WriteErr).
	Lost uint64
}

// Endpoint is a capturing wrapper around a link endpoint: it behaves as
// the wrapped endpoint does, and writes a record of every packet the
// wrapped endpoint delivers or takes for sending. It is safe for
// concurrent use; its writer goroutine starts in New and is joined by
// Close.
//
// It is transparent (STYLE rule 17): through the embedded
// linkutil.Passthrough it implements every optional interface link/doc.go
// lists and passes each through to the wrapped endpoint; where the
// wrapped endpoint lacks one, the method reports what an endpoint without
// it would, and writability is signalled from a timer after a refused
// write. A busy-polled round of the wrapped endpoint delivers through the
// wrapper, and is captured, as any other.
type Endpoint struct {
	stack.LinkEndpoint
	linkutil.Passthrough

	linkType uint32
	snapLen  int
	q        *queue
	life     linkutil.Lifecycle
}

// New returns lower wrapped in a capture that writes to w, starting with
// the file header. The wrapper owns lower: closing the wrapper closes it.
// w stays the caller's, who must not use it until Close returned; it is
// written from the wrapper's goroutine only.
func New(lower stack.LinkEndpoint, w io.Writer, o *Options) (*Endpoint, error) {
	if lower == nil {
		return nil, errors.New("pcap: nil link endpoint: open the link before wrapping it")
	}
	if w == nil {
		return nil, errors.New("pcap: nil writer: give the capture a file or buffer to write to")
	}
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.SnapLen == 0 {
		opts.SnapLen = DefaultSnapLen
	}
	if opts.BufferSize == 0 {
		opts.BufferSize = DefaultBufferSize
	}
	if opts.SnapLen < 1 || opts.SnapLen > MaxSnapLen {
		return nil, fmt.Errorf("pcap: snap length %d: must be from 1 to %d bytes", opts.SnapLen, MaxSnapLen)
	}
	if opts.BufferSize < recordHeaderLen+opts.SnapLen {
		return nil, fmt.Errorf("pcap: buffer size %d: must hold one record of the snap length (%d bytes)", opts.BufferSize, recordHeaderLen+opts.SnapLen)
	}
	e := &Endpoint{
		LinkEndpoint: lower,
		Passthrough:  linkutil.NewPassthrough(lower),
		linkType:     LinkTypeRaw,
		snapLen:      opts.SnapLen,
	}
	if lower.ARPHardwareType() == header.ARPHardwareEther {
		e.linkType = LinkTypeEthernet
	}
	e.q = newQueue(w, fileHeader(opts.SnapLen, e.linkType), opts.SnapLen, opts.BufferSize)
	return e, nil
}

// LinkType returns the link type the capture's header declares:
// LinkTypeEthernet or LinkTypeRaw.
func (e *Endpoint) LinkType() uint32 { return e.linkType }

// SnapLen returns the most bytes of a packet a record keeps.
func (e *Endpoint) SnapLen() int { return e.snapLen }

// Counts returns what the capture did so far. Safe from any goroutine.
func (e *Endpoint) Counts() Counts {
	return Counts{
		Packets:   e.q.packets.Load(),
		Bytes:     e.q.bytes.Load(),
		Truncated: e.q.truncated.Load(),
		Dropped:   e.q.dropped.Load(),
		Lost:      e.q.lost.Load(),
	}
}

// WriteErr returns the writer's first error (or its Flush's at Close),
// after which nothing more was captured; nil while it takes everything.
// The link itself is unaffected: this is not the wrapped endpoint's Err.
func (e *Endpoint) WriteErr() error {
	if p := e.q.err.Load(); p != nil {
		return fmt.Errorf("pcap: writing the capture: %w", *p)
	}
	return nil
}

// Unwrap returns the wrapped endpoint, for its own methods (queue
// counters, names). The wrapper still owns it.
func (e *Endpoint) Unwrap() stack.LinkEndpoint { return e.LinkEndpoint }

// Attach implements stack.LinkEndpoint: the wrapped endpoint delivers to
// the wrapper, which captures each packet and delivers it to d.
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

// SetOnCloseAction implements stack.LinkEndpoint. The action belongs to
// the wrapper (the NIC holds the wrapper, not the wrapped endpoint).
func (e *Endpoint) SetOnCloseAction(f func()) { e.life.SetOnCloseAction(f) }

// Close runs the on-close action (which removes the NIC), closes the
// wrapped endpoint, writes what the buffer holds, flushes the writer if
// it has a Flush method, and joins the writer goroutine: it waits for
// the writer. It does not close the writer. Idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.life.BeginClose(); !first {
		return
	}
	e.LinkEndpoint.Close()
	linkutil.StopPassthrough(&e.Passthrough)
	e.q.close()
}

// WritePackets implements stack.LinkWriter: the wrapped endpoint writes
// the batch, and each packet it took is captured, once. The caller keeps
// its references and the list.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n, err := e.LinkEndpoint.WritePackets(pkts)
	if n < pkts.Len() {
		linkutil.Refused(&e.Passthrough)
	}
	if n > 0 {
		e.q.capture(time.Now(), pkts.AsSlice()[:n]...)
	}
	return n, err
}

// rxTap is the dispatcher the wrapped endpoint delivers to.
type rxTap struct{ e *Endpoint }

// DeliverNetworkPacket captures pkt and delivers it. The caller keeps its
// reference.
func (t rxTap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	t.e.q.capture(time.Now(), pkt)
	if d := t.e.life.Dispatcher(); d != nil {
		d.DeliverNetworkPacket(proto, pkt)
	}
}

// DeliverLinkPacket passes link-level copies through uncaptured: they are
// copies of packets the capture sees where they cross the link.
func (t rxTap) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if d := t.e.life.Dispatcher(); d != nil {
		d.DeliverLinkPacket(proto, pkt)
	}
}
