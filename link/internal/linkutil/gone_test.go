package linkutil

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link"
)

// TestDeviceGone: the error matches the sentinel and its cause, and its
// message names the device, the cause and what to do.
func TestDeviceGone(t *testing.T) {
	cause := os.NewSyscallError("read", syscall.EIO)
	err := DeviceGone("tun tun0", cause)
	require.ErrorIs(t, err, link.ErrDeviceGone)
	require.ErrorIs(t, err, syscall.EIO)
	var se *os.SyscallError
	require.True(t, errors.As(err, &se))
	require.Equal(t, "tun tun0: the device is gone (read: "+syscall.EIO.Error()+"): close the endpoint, and open it again once the device exists", err.Error())
}
