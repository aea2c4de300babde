package stack

import (
	"errors"
	"io"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// TranslateError is the one translation of a gVisor error into a Go
// error, made once, at the net.Conn boundary, by every conn and dial of
// this package, package forward and package wgnet: the errno a Linux
// socket gives for it, as gVisor's own Linux system call layer
// (pkg/syserr) translates it, so that errors.Is(err,
// syscall.ECONNREFUSED) works as it does for the kernel's sockets; io.EOF
// for a read past the end of the stream (gVisor's ErrClosedForReceive,
// which has no errno: Linux's read returns 0). An error gVisor adds after
// this was written keeps its message, without an errno. Code that drives
// gVisor endpoints itself (a forward.Handler, say) translates their
// errors with it too.
func TranslateError(err tcpip.Error) error {
	switch err.(type) {
	case *tcpip.ErrClosedForReceive:
		return io.EOF

	// Connections.
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrAborted, *tcpip.ErrClosedForSend:
		return syscall.EPIPE
	case *tcpip.ErrNotConnected:
		return syscall.ENOTCONN
	case *tcpip.ErrAlreadyConnected:
		return syscall.EISCONN
	case *tcpip.ErrAlreadyConnecting:
		return syscall.EALREADY
	case *tcpip.ErrConnectStarted:
		return syscall.EINPROGRESS

	// Reachability.
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrHostDown:
		return syscall.EHOSTDOWN
	case *tcpip.ErrNetworkUnreachable:
		return syscall.ENETUNREACH
	case *tcpip.ErrNoNet:
		return errNoNet

	// Addresses and ports.
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrNoPortAvailable:
		return syscall.EAGAIN
	case *tcpip.ErrDestinationRequired:
		return syscall.EDESTADDRREQ
	case *tcpip.ErrAddressFamilyNotSupported:
		return syscall.EAFNOSUPPORT
	case *tcpip.ErrBroadcastDisabled:
		return syscall.EACCES
	case *tcpip.ErrBadAddress, *tcpip.ErrBadBuffer:
		return syscall.EFAULT
	case *tcpip.ErrDuplicateAddress, *tcpip.ErrDuplicateNICID:
		return syscall.EEXIST
	case *tcpip.ErrUnknownNICID, *tcpip.ErrUnknownDevice:
		return syscall.ENODEV

	// Sending and receiving.
	case *tcpip.ErrWouldBlock:
		return syscall.EAGAIN
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrMessageTooLong:
		return syscall.EMSGSIZE
	case *tcpip.ErrNotPermitted:
		return syscall.EPERM
	case *tcpip.ErrEndpointBusy:
		return syscall.EBUSY

	// Options and arguments.
	case *tcpip.ErrNotSupported:
		return syscall.EOPNOTSUPP
	case *tcpip.ErrQueueSizeNotSupported:
		return syscall.ENOTTY
	case *tcpip.ErrUnknownProtocolOption:
		return syscall.ENOPROTOOPT
	case *tcpip.ErrNoSuchFile:
		return syscall.ENOENT
	case *tcpip.ErrAlreadyBound, *tcpip.ErrInvalidEndpointState, *tcpip.ErrInvalidOptionValue,
		*tcpip.ErrInvalidPortRange, *tcpip.ErrMalformedHeader, *tcpip.ErrUnknownProtocol,
		*tcpip.ErrMulticastInputCannotBeOutput, *tcpip.ErrMissingRequiredFields,
		*tcpip.ErrInvalidNICID:
		return syscall.EINVAL
	}
	return errors.New(err.String())
}
