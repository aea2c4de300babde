//go:build !linux

package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/icmp"
)

// hostPoller is Linux-only (epoll); elsewhere the Forwarder has none.
type hostPoller struct{}

// hostSplice is Linux-only (it asks the socket how much it holds with
// SIOCINQ, and parks idle flows in epoll); elsewhere Splice copies
// generically.
func hostSplice(*conn, *net.TCPConn, bool) (<-chan struct{}, bool) { return nil, false }

// hostUDP is Linux-only; elsewhere UDP through host sockets is refused
// (HostError).
func hostUDP(*relay, *UDPFlow) bool { return false }

// listenHostUDP is Linux-only, as hostUDP.
func listenHostUDP(context.Context, *net.Dialer, bool) (*net.UDPConn, error) {
	return nil, errors.ErrUnsupported
}

// listenPingDgram opens an ICMP datagram socket through x/net/icmp, which
// takes no control function: with one, it is Linux-only.
func listenPingDgram(control controlFunc, _ string, laddr netip.Addr) (net.PacketConn, error) {
	if control != nil {
		return nil, fmt.Errorf("forward: an ICMP datagram socket with the dialer's Control: %w", errors.ErrUnsupported)
	}
	network := "udp4"
	if laddr.Is6() {
		network = "udp6"
	}
	return icmp.ListenPacket(network, laddr.String())
}
