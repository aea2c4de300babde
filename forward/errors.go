package forward

import (
	"fmt"
	"net"
	"net/netip"
)

// RefusedError is the error of a flow the Forwarder refused itself, by
// policy or limit, before any packet left: what Forwarder.DialTCP and
// Forwarder.DialUDP return (inside a *net.OpError) when a limit or the
// budget stands in the way, or the Forwarder is closing. Match it with
// errors.As to learn the Reason. A refusal by the far side (a reset) is
// not one: it is the errno, syscall.ECONNREFUSED, as from the kernel.
type RefusedError struct {
	// Reason is why, as counted in Stats.Refused.
	Reason Reason
}

// Error says which limit refused the flow and what to do about it.
func (e *RefusedError) Error() string {
	switch e.Reason {
	case FlowLimit, TCPLimit, UDPLimit:
		return fmt.Sprintf("refused by the Forwarder (%s): too many flows open; close some or raise Options.MaxFlows, MaxTCP or MaxUDP", e.Reason)
	case Budget:
		return fmt.Sprintf("refused by the Forwarder (%s): open flows hold Options.MemoryBudget; close some, raise it or lower Options.TCPBuffer", e.Reason)
	case HalfOpen:
		return fmt.Sprintf("refused by the Forwarder (%s): too many connections are still in their handshake; retry once they finish", e.Reason)
	case Closing:
		return fmt.Sprintf("refused by the Forwarder (%s): it is shutting down", e.Reason)
	}
	return fmt.Sprintf("refused by the Forwarder (%s)", e.Reason)
}

// refusedError is the error of a dial the Forwarder refused.
func refusedError(network string, dst netip.AddrPort, r Reason) error {
	var a net.Addr = net.TCPAddrFromAddrPort(dst)
	if network == "udp" {
		a = net.UDPAddrFromAddrPort(dst)
	}
	return &net.OpError{Op: "dial", Net: network, Addr: a, Err: &RefusedError{Reason: r}}
}
