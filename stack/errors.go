package stack

import (
	"net"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// translated lists the gVisor errors that netError turns into an errno
// or net.ErrClosed. Keep it in step with netError's cases:
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
// netError's translation of it.
var byMessage = func() map[string]error {
	m := make(map[string]error, len(translated))
	for _, e := range translated {
		m[e.String()] = netError(e)
	}
	return m
}()

// gonetError translates an error made by gonet's conns, on the paths
// where the stack's conns hand a call to gonet (a wait with a deadline,
// say). gonet keeps only a gVisor error's message (errors.New of its
// String), so the error is found again by that message, which comes
// from the same gVisor types netError translates. Anything else passes
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
