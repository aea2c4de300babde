package linktest

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// WaitTimeout is how long Sink.Wait waits before failing the test: long
// enough for a loaded CI machine under the race detector, short enough
// that a lost packet fails the test rather than the whole run's deadline.
const WaitTimeout = 20 * time.Second

// Packet is what a Sink recorded of one delivered packet: copies, so the
// test owns them.
type Packet struct {
	Proto tcpip.NetworkProtocolNumber
	// Data is the whole packet as delivered (pkt.ToBuffer()).
	Data []byte
	// LinkHeader is the link header the endpoint parsed, if any, and
	// Payload what follows it (pkt.Data()).
	LinkHeader, Payload []byte
	PktType             tcpip.PacketType
	// At is when the packet was delivered.
	At time.Time
}

// Sink is a stack.NetworkDispatcher that records a copy of every network
// packet delivered to it, in order. Link-level copies (DeliverLinkPacket)
// are only counted. The zero value is ready to use; it is safe for
// concurrent use.
type Sink struct {
	// Hold keeps a reference to every delivered packet, as a socket queue
	// does until the application reads, until Release. Set it before the
	// first delivery.
	Hold bool

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every delivery
	pkts      []Packet
	held      []*stack.PacketBuffer
	linkPkts  int
	delivered atomic.Uint64
}

// NewSink returns an empty Sink.
func NewSink() *Sink { return &Sink{} }

// DeliverNetworkPacket implements stack.NetworkDispatcher. The caller
// keeps its reference; with Hold the Sink takes one of its own.
func (s *Sink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	b := pkt.ToBuffer()
	p := Packet{
		Proto:      proto,
		Data:       b.Flatten(),
		LinkHeader: bytes.Clone(pkt.LinkHeader().Slice()),
		Payload:    pkt.Data().AsRange().ToSlice(),
		PktType:    pkt.PktType,
		At:         time.Now(),
	}
	b.Release()
	s.mu.Lock()
	s.pkts = append(s.pkts, p)
	if s.Hold {
		s.held = append(s.held, pkt.IncRef())
	}
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
	s.delivered.Add(1)
}

// DeliverLinkPacket implements stack.NetworkDispatcher: it only counts.
func (s *Sink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	s.mu.Lock()
	s.linkPkts++
	s.mu.Unlock()
}

// Len returns how many network packets were delivered.
func (s *Sink) Len() int { return int(s.delivered.Load()) }

// LinkPackets returns how many link-level copies were delivered.
func (s *Sink) LinkPackets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkPkts
}

// Packets returns what was delivered so far, in order.
func (s *Sink) Packets() []Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Packet(nil), s.pkts...)
}

// Wait waits until at least n packets were delivered and returns them all,
// failing tb if that takes longer than WaitTimeout.
func (s *Sink) Wait(tb testing.TB, n int) []Packet {
	tb.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if len(s.pkts) >= n {
			got := append([]Packet(nil), s.pkts...)
			s.mu.Unlock()
			return got
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch, have := s.changed, len(s.pkts)
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			tb.Fatalf("linktest: %d packets delivered after %v, want %d", have, WaitTimeout, n)
		}
	}
}

// Held returns the packets Hold kept, in delivery order. The Sink keeps
// its references until Release: a test reads them late to check that a
// link did not reuse their memory while the stack held them.
func (s *Sink) Held() []*stack.PacketBuffer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*stack.PacketBuffer(nil), s.held...)
}

// Release drops the references Hold kept and returns how many there were.
func (s *Sink) Release() int {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, p := range held {
		p.DecRef()
	}
	return len(held)
}

// Counter is a stack.NetworkDispatcher that only counts network packets,
// so that a benchmark measures the link and not a recorder. It is safe for
// concurrent use.
type Counter struct{ n atomic.Uint64 }

// DeliverNetworkPacket implements stack.NetworkDispatcher.
func (c *Counter) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	c.n.Add(1)
}

// DeliverLinkPacket implements stack.NetworkDispatcher; it counts nothing.
func (*Counter) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// Count returns how many network packets were delivered.
func (c *Counter) Count() uint64 { return c.n.Load() }
