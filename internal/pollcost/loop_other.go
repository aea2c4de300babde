//go:build !linux

package pollcost

import (
	"errors"
	"net"
)

// loop is ModeLoop's Relay, which needs Linux's epoll.
func loop(a, b *net.TCPConn) error {
	return errors.New("pollcost: mode loop needs Linux (epoll)")
}
