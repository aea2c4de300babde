//go:build !linux

package forward

import "net"

// hostSplice is Linux-only (it asks the socket how much it holds with
// SIOCINQ); elsewhere Splice copies generically.
func hostSplice(*conn, *net.TCPConn) bool { return false }

// hostUDP is Linux-only; elsewhere UDP through host sockets is refused
// (HostError).
func hostUDP(*relay, *UDPFlow) bool { return false }
