package sandbox

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/pcap"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// tapEndpoint is what a TAP sandbox's link wraps: the device's Ethernet
// endpoint, or a capture around it, with every optional interface a link
// endpoint may have (link/doc.go lists them), so that wrapping it hides
// none.
type tapEndpoint interface {
	gstack.LinkEndpoint
	gstack.GSOEndpoint
	poll.Source
	sched.WritableNotifier
	sched.RoundNotifier
	link.Reporter
	link.Coalescer
	link.CacheReporter
	link.ErrReporter
}

var (
	_ tapEndpoint = (*tun.EthernetEndpoint)(nil)
	_ tapEndpoint = (*pcap.Endpoint)(nil)
	_ tapEndpoint = (*tapLink)(nil)
)

// tapLink is a TAP sandbox's link: the device's Ethernet endpoint (in a
// capture, if Config.Capture asks for one), every method of it promoted,
// with router solicitations noticed on their way to the stack (which
// drops them: a host that does not route ignores them) and raw IP
// packets framed on their way out.
//
// What the stack writes raw (gstack.Stack.WriteRawPacket) on a sandbox's
// NIC is an IP packet without a link header: package forward sends its
// UDP replies and pings to the sandbox so, as a TUN device takes them.
// gVisor would take its first bytes for an Ethernet header and send it
// on as a frame no one can read; tapLink instead frames it as the stack
// frames its own packets, to the MAC address the neighbour cache has for
// its destination (the sandbox, which resolved ustack's address before
// it sent anything, so the cache knows it).
type tapLink struct {
	tapEndpoint
	adv *atomic.Pointer[advertiser] // set once the NIC exists
	nic atomic.Pointer[nicRef]      // set once the NIC exists
}

// nicRef is the NIC a tapLink is, in its stack, for neighbour lookups.
type nicRef struct {
	st *gstack.Stack
	id tcpip.NICID
}

// Attach implements gstack.NetworkLinkEndpoint.
func (l *tapLink) Attach(d gstack.NetworkDispatcher) {
	if d == nil {
		l.tapEndpoint.Attach(nil)
		return
	}
	l.tapEndpoint.Attach(&rsWatch{NetworkDispatcher: d, adv: l.adv})
}

// ParseHeader implements gstack.LinkEndpoint: a raw write's packet has
// no link header to parse (see tapLink); WritePackets frames it.
func (l *tapLink) ParseHeader(*gstack.PacketBuffer) bool { return true }

// WritePackets implements gstack.LinkEndpoint: every packet goes as it
// is but a raw write's, which has no link header yet and goes framed
// (see tapLink), or is dropped and counted by the stack as an error if
// its destination's MAC address is not known (its resolution is started
// for the next one). The caller keeps its references to pkts.
func (l *tapLink) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	raw := false
	for _, p := range pkts.AsSlice() {
		raw = raw || len(p.LinkHeader().Slice()) == 0
	}
	if !raw {
		return l.tapEndpoint.WritePackets(pkts)
	}
	var out gstack.PacketBufferList
	var framed []*gstack.PacketBuffer
	defer func() {
		for _, f := range framed {
			f.DecRef()
		}
	}()
	for _, p := range pkts.AsSlice() {
		if len(p.LinkHeader().Slice()) != 0 {
			out.PushBack(p)
			continue
		}
		f := l.frame(p)
		if f == nil {
			// What was before it still goes; the caller sees how far.
			break
		}
		framed = append(framed, f)
		out.PushBack(f)
	}
	if out.Len() == 0 {
		return 0, &tcpip.ErrHostUnreachable{}
	}
	n, err := l.tapEndpoint.WritePackets(out)
	if err == nil && n < pkts.Len() {
		err = &tcpip.ErrHostUnreachable{}
	}
	return n, err
}

// frame returns a copy of p, an IP packet without a link header, framed
// to its destination's MAC address, or nil if that is not known yet.
func (l *tapLink) frame(p *gstack.PacketBuffer) *gstack.PacketBuffer {
	ref := l.nic.Load()
	if ref == nil {
		return nil
	}
	b := p.ToView()
	defer b.Release()
	var dst tcpip.Address
	proto := header.IPv4ProtocolNumber
	switch ip := b.AsSlice(); {
	case len(ip) >= header.IPv4MinimumSize && ip[0]>>4 == 4:
		dst = header.IPv4(ip).DestinationAddress()
	case len(ip) >= header.IPv6MinimumSize && ip[0]>>4 == 6:
		dst, proto = header.IPv6(ip).DestinationAddress(), header.IPv6ProtocolNumber
	default:
		return nil
	}
	var mac tcpip.LinkAddress
	ref.st.GetLinkAddress(ref.id, dst, tcpip.Address{}, proto, func(r gstack.LinkResolutionResult) {
		// Called at once, before GetLinkAddress returns, when the
		// address is known; later, once resolved, otherwise.
		if r.Err == nil && mac == "" {
			mac = r.LinkAddress
		}
	})
	if mac == "" {
		return nil
	}
	f := gstack.NewPacketBuffer(gstack.PacketBufferOptions{
		ReserveHeaderBytes: header.EthernetMinimumSize,
		Payload:            buffer.MakeWithData(b.AsSlice()),
	})
	f.NetworkProtocolNumber = proto
	f.EgressRoute.RemoteLinkAddress = mac
	f.EgressRoute.LocalLinkAddress = l.LinkAddress()
	l.AddHeader(f)
	return f
}

// rsWatch is the dispatcher tapLink's endpoint delivers to.
type rsWatch struct {
	gstack.NetworkDispatcher
	adv *atomic.Pointer[advertiser]
}

// DeliverNetworkPacket implements gstack.NetworkDispatcher.
func (w *rsWatch) DeliverNetworkPacket(p tcpip.NetworkProtocolNumber, pkt *gstack.PacketBuffer) {
	if p == header.IPv6ProtocolNumber && isRouterSolicit(pkt) {
		if a := w.adv.Load(); a != nil {
			a.solicited()
		}
	}
	w.NetworkDispatcher.DeliverNetworkPacket(p, pkt)
}

// nicLink is the endpoint the sandbox's NIC is made of: the device's, in
// a capture if Config.Capture asks for one, and for a TAP device in its
// Ethernet framing, in a tapLink.
func (s *Sandbox) nicLink() (gstack.LinkEndpoint, error) {
	var l gstack.LinkEndpoint = s.ep
	var tap tapEndpoint
	if s.ep.TAP() {
		tap = s.ep.Ethernet()
		l = tap
	}
	if s.cfg.Capture != nil {
		c, err := pcap.New(l, s.cfg.Capture, nil)
		if err != nil {
			return nil, fmt.Errorf("sandbox: capture: %w", err)
		}
		s.capture = c
		l, tap = c, c
	}
	if tap != nil {
		s.tap = &tapLink{tapEndpoint: tap, adv: &s.adv}
		l = s.tap
	}
	return l, nil
}

// startAdvertising gives a TAP sandbox's NIC its link-local address and
// starts its router advertisements, unless IPv6 or they are off.
func (s *Sandbox) startAdvertising() error {
	c := &s.cfg
	if !s.ep.TAP() || c.NoIPv6 || c.NoRA {
		return nil
	}
	mac := s.ep.LinkAddress()
	ll := linkLocal(mac)
	if err := s.st.AddAddress(s.nic, netip.PrefixFrom(ll, 64)); err != nil {
		return fmt.Errorf("sandbox: link-local address %v: %w", ll, err)
	}
	o := &raOptions{src: ll, mac: mac, mtu: s.ep.MTU(), prefix: c.Addr6.Masked()}
	if !c.NoDNS && !c.DNS6.IsUnspecified() {
		o.dns = c.DNS6
	}
	s.adv.Store(newAdvertiser(s.st.GVisor(), s.nic, o))
	return nil
}
