package stack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// ErrClosed is returned by operations on a Stack after Close.
var ErrClosed = errors.New("ustack: stack closed")

// Stack is a ustack host. It is safe for concurrent use.
type Stack struct {
	s *gstack.Stack

	routing     bool // Options.Routing: NICs get no receive coalescing
	udpRecvErr  bool
	udpWait     time.Duration                                                         // Options.UDPWait with its default; <= 0: never
	poller      *poll.Poller                                                          // busy polling; Mode off when disabled
	cache       bool                                                                  // conns keep their scratch (Options.Cache)
	dns         *resolver                                                             // Options.DNS behind Resolver (resolve.go)
	lookupHost  func(ctx context.Context, network, host string) ([]netip.Addr, error) // Options.Lookup; nil: dns
	transparent *transparentHandlers                                                  // Options.Transparent: nil when off
	delayedACK  time.Duration                                                         // TCPOptions.DelayedACK with its default; <= 0: off

	mu     sync.Mutex // guards nics and closed
	nics   []*nic
	closed bool
}

// nic is what we remember about a NIC beyond what gVisor keeps.
type nic struct {
	id    tcpip.NICID
	name  string
	qdisc string
	ep    gstack.LinkEndpoint
	qd    gstack.QueueingDiscipline // nil for sched.None
	ack   *ackDelayer               // nil when delayed ACKs are off
}

// New builds a stack with IPv4, IPv6, ARP, ICMPv4/v6, TCP and UDP and no
// NICs. A nil opts means the defaults.
func New(opts *Options) (*Stack, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var tcpOpts TCPOptions
	if o.TCP != nil {
		tcpOpts = *o.TCP
	}
	tcpOpts = tcpOpts.normalized()
	s := gstack.New(gstack.Options{
		NetworkProtocols:   []gstack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// Packets to the host's own addresses are delivered locally, as a
		// kernel does, rather than sent out of a NIC.
		HandleLocal: !o.Transparent,
	})
	err := tcpOpts.apply(func(opt tcpip.SettableTransportProtocolOption) tcpip.Error {
		return s.SetTransportProtocolOption(tcp.ProtocolNumber, opt)
	})
	if err == nil && o.Routing {
		for _, p := range []tcpip.NetworkProtocolNumber{ipv4.ProtocolNumber, ipv6.ProtocolNumber} {
			if terr := s.SetForwardingDefaultAndAllNICs(p, true); terr != nil {
				err = fmt.Errorf("enable routing (IP forwarding) for protocol %d: %s", p, terr)
				break
			}
		}
	}
	var p *poll.Poller
	if err == nil {
		p, err = poll.New(o.BusyPoll)
	}
	if err != nil {
		s.Destroy()
		return nil, err
	}
	if o.UDPWait == 0 {
		o.UDPWait = DefaultUDPWait
	}
	st := &Stack{s: s, routing: o.Routing, udpRecvErr: o.UDPRecvErr, udpWait: o.UDPWait, poller: p, cache: o.Cache.On(), delayedACK: tcpOpts.DelayedACK}
	st.dns = newResolver(st, o.DNS)
	st.lookupHost = o.Lookup
	if o.Transparent {
		st.transparent = installTransparentHandlers(s)
	}
	return st, nil
}

// Caching reports whether buffer caching is on (Options.Cache), for
// servers built on the stack that keep buffers of their own per conn.
func (s *Stack) Caching() bool { return s.cache }

// GVisor returns the underlying gVisor stack, for what this package does not
// wrap (forwarders, raw endpoints, iptables). The Stack still owns it: do
// not Close or Destroy it yourself.
func (s *Stack) GVisor() *gstack.Stack { return s.s }

// NICOptions configures AddNIC. A nil *NICOptions means the defaults.
type NICOptions struct {
	// Name names the NIC; "" means "nicN" with N its ID.
	Name string
	// Qdisc is the queueing discipline's name in package sched; "" means
	// sched.None, gVisor's default.
	Qdisc string
	// QdiscOptions tunes the discipline; nil means its defaults.
	QdiscOptions *sched.Options
}

// AddNIC adds a NIC over ep and returns its ID. On success the Stack owns
// ep and closes it in Close; on error ep is still the caller's.
func (s *Stack) AddNIC(ep gstack.LinkEndpoint, opts *NICOptions) (tcpip.NICID, error) {
	var o NICOptions
	if opts != nil {
		o = *opts
	}
	if ep == nil {
		return 0, errors.New("add NIC: nil link endpoint")
	}
	if o.Qdisc == "" {
		o.Qdisc = sched.None
	}
	if !sched.Known(o.Qdisc) {
		return 0, fmt.Errorf("add NIC %q: %w", o.Name, &sched.UnknownError{Name: o.Qdisc})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	id := s.s.NextNICID()
	if o.Name == "" {
		o.Name = fmt.Sprintf("nic%d", id)
	}
	// sched.None means gVisor's own default path (a nil QDisc), so that the
	// baseline is gVisor's code and not our copy of it.
	var qd gstack.QueueingDiscipline
	if o.Qdisc != sched.None {
		var err error
		if qd, err = sched.New(o.Qdisc, ep, o.QdiscOptions); err != nil {
			return 0, fmt.Errorf("add NIC %q: %w", o.Name, err)
		}
	}
	if s.routing {
		if c, ok := ep.(link.Coalescer); ok {
			c.SetCoalescing(false) // see Options.Routing
		}
	}
	// The delayed ACK stands in front of the discipline (or of the link,
	// for sched.None) and owns it.
	outer := qd
	var ack *ackDelayer
	if s.delayedACK > 0 {
		var next gstack.QueueingDiscipline = linkQdisc{ep}
		if qd != nil {
			next = qd
		}
		ack = newACKDelayer(next, s.delayedACK)
		outer = ack
	}
	if err := s.s.CreateNICWithOptions(id, ep, gstack.NICOptions{Name: o.Name, QDisc: outer}); err != nil {
		if outer != nil {
			outer.Close()
		}
		return 0, fmt.Errorf("add NIC %q: %s", o.Name, err)
	}
	s.nics = append(s.nics, &nic{id: id, name: o.Name, qdisc: o.Qdisc, ep: ep, qd: qd, ack: ack})
	if src, ok := ep.(poll.Source); ok && s.poller.Enabled() {
		s.poller.Add(src)
	}
	return id, nil
}

// AddAddress assigns addr (with its prefix length) to the NIC and adds the
// on-link route for its subnet, as a kernel does.
func (s *Stack) AddAddress(id tcpip.NICID, addr netip.Prefix) error {
	if !addr.IsValid() {
		return fmt.Errorf("add address %v: not a valid CIDR prefix", addr)
	}
	a := addr.Addr().Unmap()
	p := netip.PrefixFrom(a, addr.Bits()-(addr.Addr().BitLen()-a.BitLen()))
	if !p.IsValid() {
		return fmt.Errorf("add address %v: an IPv4-mapped prefix must be at least /96", addr)
	}
	pa := tcpip.ProtocolAddress{
		Protocol:          protocolOf(a),
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: toTCPIP(a), PrefixLen: p.Bits()},
	}
	if err := s.live(); err != nil {
		return err
	}
	if err := s.s.AddProtocolAddress(id, pa, gstack.AddressProperties{}); err != nil {
		return fmt.Errorf("add address %v to NIC %d: %s", addr, id, err)
	}
	s.s.AddRoute(tcpip.Route{Destination: pa.AddressWithPrefix.Subnet(), NIC: id})
	return nil
}

// AddRoute routes dst through the NIC, via gateway gw if gw is valid (a
// zero netip.Addr means dst is on-link).
func (s *Stack) AddRoute(dst netip.Prefix, gw netip.Addr, id tcpip.NICID) error {
	if !dst.IsValid() {
		return fmt.Errorf("add route %v: not a valid CIDR prefix", dst)
	}
	if a := dst.Addr(); a.Is4In6() {
		if dst.Bits() < 96 {
			return fmt.Errorf("add route %v: an IPv4-mapped prefix must be at least /96", dst)
		}
		dst = netip.PrefixFrom(a.Unmap(), dst.Bits()-96)
	}
	dst = dst.Masked()
	if gw.IsValid() && gw.Unmap().Is4() != dst.Addr().Is4() {
		return fmt.Errorf("add route %v via %v: gateway and destination are of different IP versions", dst, gw)
	}
	if err := s.live(); err != nil {
		return err
	}
	r := tcpip.Route{Destination: subnetOf(dst), NIC: id}
	if gw.IsValid() {
		r.Gateway = toTCPIP(gw.Unmap())
	}
	if !s.s.CheckNIC(id) {
		return fmt.Errorf("add route %v: no NIC with ID %d", dst, id)
	}
	s.s.AddRoute(r)
	return nil
}

// SetDefaultGateway routes everything of gw's IP version that no other
// route covers through gw on the NIC.
func (s *Stack) SetDefaultGateway(gw netip.Addr, id tcpip.NICID) error {
	if !gw.IsValid() {
		return errors.New("set default gateway: no address given")
	}
	gw = gw.Unmap()
	dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if gw.Is6() {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return s.AddRoute(dst, gw, id)
}

func (s *Stack) live() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Close aborts every connection, removes every NIC (closing its qdisc and
// link endpoint), and waits for every goroutine the stack started. It is
// idempotent; conns and listeners made by the stack fail after it.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// Destroy aborts endpoints, stops the protocols' goroutines, removes
	// NICs (closing their qdiscs and endpoints) and waits for all of it.
	s.s.Destroy()
	s.poller.Close()
	return nil
}

// QdiscStats returns the counters and contention profile of the NIC's
// queueing discipline, if it is one of ours (gVisor's none and fifo keep
// none).
func (s *Stack) QdiscStats(id tcpip.NICID) (sched.Stats, bool) {
	s.mu.Lock()
	var qd gstack.QueueingDiscipline
	for _, n := range s.nics {
		if n.id == id {
			qd = n.qd
		}
	}
	s.mu.Unlock()
	if r, ok := qd.(sched.Reporter); ok {
		return r.QdiscStats(), true
	}
	return sched.Stats{}, false
}

func protocolOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Unmap().Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

func toTCPIP(a netip.Addr) tcpip.Address {
	return tcpip.AddrFromSlice(a.Unmap().AsSlice())
}

func subnetOf(p netip.Prefix) tcpip.Subnet {
	return tcpip.AddressWithPrefix{Address: toTCPIP(p.Addr()), PrefixLen: p.Bits()}.Subnet()
}
