package stack

import (
	"errors"
	"net"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// RelayHandler takes a packet that no endpoint of the stack wanted (the
// shape of gVisor's per-stack default handlers). It runs in the receive
// path and must not block; returning false leaves the packet to gVisor.
// The packet stays the caller's: a handler that keeps it must IncRef it.
type RelayHandler = func(gstack.TransportEndpointID, *gstack.PacketBuffer) bool

// ErrNotRelay is returned by SetRelayHandler on a stack built without
// Options.Relay.
var ErrNotRelay = errors.New("ustack: the stack was built without Options.Relay: build it with stack.Options{Relay: true} to relay flows to addresses it does not own")

// relayHandlers holds the handlers of a relaying stack. gVisor reads its
// default handlers unsynchronised from the receive path and allows setting
// them only before the first NIC; the stack installs these trampolines at
// New instead, so a relay can be attached (and detached) at any time.
type relayHandlers struct {
	tcp, udp, icmp4, icmp6 atomic.Pointer[RelayHandler]
}

func installRelayHandlers(s *gstack.Stack) *relayHandlers {
	r := &relayHandlers{}
	for _, p := range []struct {
		num tcpip.TransportProtocolNumber
		h   *atomic.Pointer[RelayHandler]
	}{{tcp.ProtocolNumber, &r.tcp}, {udp.ProtocolNumber, &r.udp}, {icmp.ProtocolNumber4, &r.icmp4}, {icmp.ProtocolNumber6, &r.icmp6}} {
		h := p.h
		s.SetTransportProtocolHandler(p.num, func(id gstack.TransportEndpointID, pkt *gstack.PacketBuffer) bool {
			if f := h.Load(); f != nil {
				return (*f)(id, pkt)
			}
			return false
		})
	}
	return r
}

// SetRelayHandler makes h take the packets of transport protocol p (TCP,
// UDP, ICMPv4 or ICMPv6) that no endpoint wanted; nil removes it. It is
// for relays (package forward) and needs a stack built with
// Options.Relay. Safe to call while packets flow.
func (s *Stack) SetRelayHandler(p tcpip.TransportProtocolNumber, h RelayHandler) error {
	if s.relay == nil {
		return ErrNotRelay
	}
	var slot *atomic.Pointer[RelayHandler]
	switch p {
	case tcp.ProtocolNumber:
		slot = &s.relay.tcp
	case udp.ProtocolNumber:
		slot = &s.relay.udp
	case icmp.ProtocolNumber4:
		slot = &s.relay.icmp4
	case icmp.ProtocolNumber6:
		slot = &s.relay.icmp6
	default:
		return errors.New("ustack: set relay handler: transport protocol is not TCP, UDP or ICMP")
	}
	if h == nil {
		slot.Store(nil)
	} else {
		slot.Store(&h)
	}
	return nil
}

// Relaying reports whether the stack was built with Options.Relay.
func (s *Stack) Relaying() bool { return s.relay != nil }

// NewTCPConn wraps a connected TCP endpoint made on this stack (by a
// forwarder, say) in the net.Conn DialTCP returns, with the stack's busy
// polling and buffer cache; it has CloseRead and CloseWrite. The conn owns
// ep from here on.
func (s *Stack) NewTCPConn(wq *waiter.Queue, ep tcpip.Endpoint) net.Conn {
	if s.poller.Enabled() || s.cache {
		return newTCPConn(wq, ep, s.poller, s.cache)
	}
	return gonet.NewTCPConn(wq, ep)
}
