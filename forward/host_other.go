//go:build !linux

package forward

import "net"

// hostPoller is Linux-only (epoll); elsewhere the Forwarder has none.
type hostPoller struct{}

// hostSplice is Linux-only (it asks the socket how much it holds with
// SIOCINQ, and parks idle flows in epoll); elsewhere Splice copies
// generically.
func hostSplice(*conn, *net.TCPConn, bool) (<-chan struct{}, bool) { return nil, false }

// hostUDP is Linux-only; elsewhere UDP through host sockets is refused
// (HostError).
func hostUDP(*relay, *UDPFlow) bool { return false }
