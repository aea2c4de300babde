package stack

import (
	"errors"
	"io"
	"net"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// TranslateError is the one translation of a gVisor error into a Go
// error, made once, at the net.Conn boundary, by every conn and dial of
// this package, package forward and package wgnet: the errno where one
// matches, so that errors.Is(err, syscall.ECONNREFUSED) works as it does
// for the kernel's sockets, net.ErrClosed for an endpoint closed for
// sending, and io.EOF for a read past the end of the stream.
// Code that drives gVisor endpoints itself (a forward.Handler, say)
// translates their errors with it too.
func TranslateError(err tcpip.Error) error {
	switch err.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrHostUnreachable, *tcpip.ErrHostDown:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrNetworkUnreachable, *tcpip.ErrNoNet:
		return syscall.ENETUNREACH
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrInvalidEndpointState:
		return syscall.EINVAL
	case *tcpip.ErrClosedForSend:
		return net.ErrClosed
	case *tcpip.ErrClosedForReceive:
		return io.EOF
	}
	return errors.New(err.String())
}
