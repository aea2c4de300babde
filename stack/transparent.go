package stack

import (
	"errors"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TransparentHandler takes a packet of a transparent stack
// (Options.Transparent) that no endpoint of the stack wanted (the shape of
// gVisor's per-stack default handlers). It runs in the receive
// path and must not block; returning false leaves the packet to gVisor.
// The packet stays the caller's: a handler that keeps it must IncRef it.
type TransparentHandler = func(gstack.TransportEndpointID, *gstack.PacketBuffer) bool

// ErrNotTransparent is returned by SetTransparentHandler (and so by
// forward.New) on a stack built without Options.Transparent.
var ErrNotTransparent = errors.New("ustack: the stack was built without Options.Transparent: build it with stack.Options{Transparent: true} to take flows to addresses it does not own")

// transparentHandlers holds the handlers of a transparent stack. gVisor reads its
// default handlers unsynchronised from the receive path and allows setting
// them only before the first NIC; the stack installs these trampolines at
// New instead, so a relay can be attached (and detached) at any time.
type transparentHandlers struct {
	tcp, udp, icmp4, icmp6 atomic.Pointer[TransparentHandler]
}

func installTransparentHandlers(s *gstack.Stack) *transparentHandlers {
	r := &transparentHandlers{}
	for _, p := range []struct {
		num tcpip.TransportProtocolNumber
		h   *atomic.Pointer[TransparentHandler]
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

// SetTransparentHandler makes h take the packets of transport protocol p
// (TCP, UDP, ICMPv4 or ICMPv6) that no endpoint wanted; nil removes it.
// It is for package forward and needs a stack built with
// Options.Transparent. Safe to call while packets flow.
func (s *Stack) SetTransparentHandler(p tcpip.TransportProtocolNumber, h TransparentHandler) error {
	if s.transparent == nil {
		return ErrNotTransparent
	}
	var slot *atomic.Pointer[TransparentHandler]
	switch p {
	case tcp.ProtocolNumber:
		slot = &s.transparent.tcp
	case udp.ProtocolNumber:
		slot = &s.transparent.udp
	case icmp.ProtocolNumber4:
		slot = &s.transparent.icmp4
	case icmp.ProtocolNumber6:
		slot = &s.transparent.icmp6
	default:
		return errors.New("ustack: set transparent handler: transport protocol is not TCP, UDP or ICMP")
	}
	if h == nil {
		slot.Store(nil)
	} else {
		slot.Store(&h)
	}
	return nil
}

// Transparent reports whether the stack was built with Options.Transparent.
func (s *Stack) Transparent() bool { return s.transparent != nil }

// NewTCPConn wraps a connected TCP endpoint made on this stack (by a
// forwarder, say) in the conn DialTCP returns, with the stack's busy
// polling and buffer cache. The conn owns ep from here on.
func (s *Stack) NewTCPConn(wq *waiter.Queue, ep tcpip.Endpoint) TCPConn {
	return newTCPConn(wq, ep, s.poller, s.cache)
}
