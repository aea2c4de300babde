package stack

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// TestGonetErrorsTranslated checks that every gVisor error in translated
// has a translation in TranslateError, and that gonetError finds it again in
// the message-only error gonet makes of it.
func TestGonetErrorsTranslated(t *testing.T) {
	for _, e := range translated {
		want := TranslateError(e)
		var errno syscall.Errno
		require.True(t, errors.As(want, &errno) || errors.Is(want, net.ErrClosed), "netError translates %T, got %v", e, want)
		got := gonetError(&net.OpError{Op: "read", Net: "tcp", Err: errors.New(e.String())})
		require.ErrorIs(t, got, want, "%T", e)
		var op *net.OpError
		require.ErrorAs(t, got, &op)
		require.Equal(t, "read", op.Op)
	}
	other := &net.OpError{Op: "read", Net: "tcp", Err: errors.New((&tcpip.ErrMessageTooLong{}).String())}
	require.Same(t, other, gonetError(other), "an error without a translation passes unchanged")
	require.NoError(t, gonetError(nil))
}
