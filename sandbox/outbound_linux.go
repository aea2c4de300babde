package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// outboundControl is the relay's dialer's Control for
// Config.OutboundAddr4 and OutboundAddr6: it binds each TCP socket to the
// outbound address of its family before it connects, with
// IP_BIND_ADDRESS_NO_PORT, so that the port is still picked at connect,
// by the whole four-tuple (a plain bind would hold one port of the
// ephemeral range per connection, whatever its destination). A family
// without an address, and every socket but TCP, is left to routing. nil
// without either address.
func outboundControl(v4, v6 netip.Addr) func(network, address string, c syscall.RawConn) error {
	if !v4.IsValid() && !v6.IsValid() {
		return nil
	}
	return func(network, _ string, c syscall.RawConn) error {
		var a netip.Addr
		switch network {
		case "tcp4":
			a = v4
		case "tcp6":
			a = v6
		}
		if !a.IsValid() {
			return nil
		}
		var err error
		cerr := c.Control(func(fd uintptr) {
			if err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
				err = os.NewSyscallError("setsockopt IP_BIND_ADDRESS_NO_PORT", err)
				return
			}
			var sa unix.Sockaddr
			if a.Is4() {
				sa = &unix.SockaddrInet4{Addr: a.As4()}
			} else {
				sa = &unix.SockaddrInet6{Addr: a.As16()}
			}
			err = os.NewSyscallError("bind", unix.Bind(int(fd), sa))
		})
		if err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sandbox: bind to the outbound address %v: %w", a, err)
		}
		return nil
	}
}
