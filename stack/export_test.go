package stack

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// EndpointOf returns the gVisor endpoint under a conn the stack made, for
// tests that compare the conn's cost with the endpoint's own or act on
// the endpoint directly.
func EndpointOf(c net.Conn) tcpip.Endpoint {
	if s := sockOf(c); s != nil {
		return s.ep
	}
	return nil
}

// Waiting reports whether a call on c, a conn or listener the stack made,
// is waiting for the endpoint's events of mask (waiter.EventIn for a Read
// or Accept, waiter.EventOut for a Write; not the Readable and Writable
// sets, which share EventHUp and EventErr): its entry is on the
// endpoint's waiter queue. Tests wait for it, with a deadline, to know
// that a call is blocked before they act on it.
func Waiting(c any, mask waiter.EventMask) bool {
	s := sockOf(c)
	return s != nil && s.wq.Events()&mask != 0
}

func sockOf(c any) *sock {
	switch c := c.(type) {
	case *tcpConn:
		return &c.sock
	case *udpSocket:
		return &c.sock
	case *pingConn:
		return &c.sock
	case *tcpListener:
		return &c.sock
	}
	return nil
}
