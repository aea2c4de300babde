package sandbox

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/pcap"
	"github.com/ustack-dev/ustack/link/tun"
)

// raLink is a TAP sandbox's link: the device's Ethernet endpoint, every
// method of it promoted (so every optional interface passes through),
// with router solicitations noticed on their way to the stack, which
// drops them (a host that does not route ignores them).
type raLink struct {
	*tun.EthernetEndpoint
	adv *atomic.Pointer[advertiser] // set once the NIC exists
}

// Attach implements gstack.NetworkLinkEndpoint.
func (l *raLink) Attach(d gstack.NetworkDispatcher) {
	if d == nil {
		l.EthernetEndpoint.Attach(nil)
		return
	}
	l.EthernetEndpoint.Attach(&rsWatch{NetworkDispatcher: d, adv: l.adv})
}

// rsWatch is the dispatcher raLink's endpoint delivers to.
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
// its Ethernet framing for a TAP device (watched for router
// solicitations), in a capture if Config.Capture asks for one.
func (s *Sandbox) nicLink() (gstack.LinkEndpoint, error) {
	var l gstack.LinkEndpoint = s.ep
	if s.ep.TAP() {
		l = &raLink{EthernetEndpoint: s.ep.Ethernet(), adv: &s.adv}
	}
	if s.cfg.Capture != nil {
		c, err := pcap.New(l, s.cfg.Capture, nil)
		if err != nil {
			return nil, fmt.Errorf("sandbox: capture: %w", err)
		}
		s.capture = c
		l = c
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
