package stack

import (
	"errors"
	"net"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// translated lists the gVisor errors that TranslateError turns into an errno
// or net.ErrClosed. Keep it in step with TranslateError's cases:
// TestGonetErrorsTranslated checks that each one here is translated.
var translated = []tcpip.Error{
	&tcpip.ErrConnectionRefused{},
	&tcpip.ErrConnectionReset{},
	&tcpip.ErrConnectionAborted{},
	&tcpip.ErrTimeout{},
	&tcpip.ErrPortInUse{},
	&tcpip.ErrBadLocalAddress{},
	&tcpip.ErrHostUnreachable{},
	&tcpip.ErrHostDown{},
	&tcpip.ErrNetworkUnreachable{},
	&tcpip.ErrNoNet{},
	&tcpip.ErrNoBufferSpace{},
	&tcpip.ErrInvalidEndpointState{},
	&tcpip.ErrClosedForSend{},
}

// byMessage maps the message of each translated gVisor error to
// TranslateError's translation of it.
var byMessage = func() map[string]error {
	m := make(map[string]error, len(translated))
	for _, e := range translated {
		m[e.String()] = TranslateError(e)
	}
	return m
}()

// gonetError translates an error made by gonet's conns, on the paths
// where the stack's conns hand a call to gonet (a wait with a deadline,
// say). gonet keeps only a gVisor error's message (errors.New of its
// String), so the error is found again by that message, which comes
// from the same gVisor types TranslateError translates. Anything else passes
// unchanged.
func gonetError(err error) error {
	op, ok := err.(*net.OpError)
	if !ok || op.Err == nil {
		return err
	}
	t, ok := byMessage[op.Err.Error()]
	if !ok {
		return err
	}
	c := *op
	c.Err = t
	return &c
}

// gonetN is gonetError for calls that also return a count.
func gonetN(n int, err error) (int, error) { return n, gonetError(err) }

// TranslateError is the one translation of a gVisor error into a Go
// error, made once, at the net.Conn boundary, by every conn and dial of
// this package, package forward and package wgnet: the errno where one
// matches, so that errors.Is(err, syscall.ECONNREFUSED) works as it does
// for the kernel's sockets, and net.ErrClosed for a closed endpoint.
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
	case *tcpip.ErrClosedForSend, *tcpip.ErrClosedForReceive:
		return net.ErrClosed
	}
	return errors.New(err.String())
}
