//go:build !linux

package sandbox

import (
	"net/netip"
	"syscall"
)

// outboundControl binds nothing here: the sandbox serves nothing on
// this system (New returns ErrNotSupported).
func outboundControl(v4, v6 netip.Addr) func(network, address string, c syscall.RawConn) error {
	return nil
}
