package tun

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
)

var (
	_ stack.LinkEndpoint      = (*EthernetEndpoint)(nil)
	_ stack.GSOEndpoint       = (*EthernetEndpoint)(nil)
	_ stack.NetworkDispatcher = (*EthernetEndpoint)(nil)
	_ link.Reporter           = (*EthernetEndpoint)(nil)
	_ link.Coalescer          = (*EthernetEndpoint)(nil)
	_ poll.Source             = (*EthernetEndpoint)(nil)
)

// EthernetEndpoint is a TAP endpoint as a stack takes it: gVisor's
// Ethernet endpoint (package link/ethernet) around the Endpoint, which
// frames what the stack sends (the Ethernet header from the route's link
// addresses), reports the link as Ethernet with ustack's MAC, an MTU
// without the header and a need for link address resolution, so that the
// stack resolves neighbours with ARP and NDP. Endpoint.Ethernet returns
// it; give it to stack.AddNIC in the Endpoint's place.
//
// Received frames are parsed by the Endpoint itself, before its GRO,
// which coalesces IP packets and so must see them without their link
// header; the EthernetEndpoint hands them on to the stack as they come.
//
// It is transparent: every method of the Endpoint that is not about
// framing (busy polling, writability and round notifications,
// coalescing, the counters, Err, GSO, the device's name and offloads)
// passes straight through, so a stack finds every optional interface the
// Endpoint implements. Closing it closes the Endpoint. It is safe for
// concurrent use.
type EthernetEndpoint struct {
	ethernet.Endpoint
	ep *Endpoint
}

// newEthernet wraps the TAP endpoint ep, which it attaches to itself: ep
// delivers parsed frames to the wrapper, which hands them to the stack.
func newEthernet(ep *Endpoint) *EthernetEndpoint {
	w := &EthernetEndpoint{ep: ep}
	w.Endpoint.Init(ep, w)
	return w
}

// Unwrap returns the TAP endpoint inside, for its own methods. The
// EthernetEndpoint still owns it.
func (w *EthernetEndpoint) Unwrap() *Endpoint { return w.ep }

// DeliverNetworkPacket implements stack.NetworkDispatcher: the Endpoint
// has parsed the frame's Ethernet header already (its GRO needs the IP
// packet), so the packet goes to the stack as it is, not through gVisor's
// Ethernet parsing again.
func (w *EthernetEndpoint) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	w.Endpoint.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// SetMTU implements stack.LinkEndpoint: mtu is the largest packet, as
// MTU reports it; the Endpoint inside counts the Ethernet header too.
func (w *EthernetEndpoint) SetMTU(mtu uint32) {
	w.ep.SetMTU(mtu + header.EthernetMinimumSize)
}

// Name returns the device's interface name.
func (w *EthernetEndpoint) Name() string { return w.ep.Name() }

// TAP reports true: an EthernetEndpoint is a TAP device's.
func (w *EthernetEndpoint) TAP() bool { return w.ep.TAP() }

// Ethernet returns w itself, as the Endpoint's Ethernet does.
func (w *EthernetEndpoint) Ethernet() *EthernetEndpoint { return w }

// Queues returns the number of queues.
func (w *EthernetEndpoint) Queues() int { return w.ep.Queues() }

// MultiQueue reports whether the device is multi-queue.
func (w *EthernetEndpoint) MultiQueue() bool { return w.ep.MultiQueue() }

// Offloads returns what was negotiated with the kernel.
func (w *EthernetEndpoint) Offloads() Offloads { return w.ep.Offloads() }

// OffloadStats returns what the offloads did.
func (w *EthernetEndpoint) OffloadStats() OffloadStats { return w.ep.OffloadStats() }

// Err returns the Endpoint's failure (Endpoint.Err).
func (w *EthernetEndpoint) Err() error { return w.ep.Err() }

// LinkStats implements link.Reporter: the Endpoint's counters.
func (w *EthernetEndpoint) LinkStats() link.Stats { return w.ep.LinkStats() }

// QueueStats returns each queue's counters (Endpoint.QueueStats).
func (w *EthernetEndpoint) QueueStats() []link.Stats { return w.ep.QueueStats() }

// CacheStats returns what the queues' landing-buffer caches counted.
func (w *EthernetEndpoint) CacheStats() cache.Stats { return w.ep.CacheStats() }

// SetCoalescing implements link.Coalescer (Endpoint.SetCoalescing).
func (w *EthernetEndpoint) SetCoalescing(on bool) { w.ep.SetCoalescing(on) }

// NotifyRounds implements sched.RoundNotifier: the Endpoint's receive
// rounds deliver through w, so what their delivery writes still leaves
// in one flush at the round's end.
func (w *EthernetEndpoint) NotifyRounds(begin, end func()) { w.ep.NotifyRounds(begin, end) }

// NotifyWritable implements sched.WritableNotifier
// (Endpoint.NotifyWritable).
func (w *EthernetEndpoint) NotifyWritable(f func()) { w.ep.NotifyWritable(f) }

// BusyPollBegin implements poll.Source.
func (w *EthernetEndpoint) BusyPollBegin() { w.ep.BusyPollBegin() }

// BusyPollEnd implements poll.Source.
func (w *EthernetEndpoint) BusyPollEnd() { w.ep.BusyPollEnd() }

// BusyPollWatchdog implements poll.Source.
func (w *EthernetEndpoint) BusyPollWatchdog() bool { return w.ep.BusyPollWatchdog() }

// BusyPoll implements poll.Source: one round on each queue, delivered
// through w.
func (w *EthernetEndpoint) BusyPoll() int { return w.ep.BusyPoll() }
