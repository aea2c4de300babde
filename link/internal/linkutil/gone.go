package linkutil

import (
	"fmt"

	"github.com/ustack-dev/ustack/link"
)

// DeviceGone is the error a device endpoint's Err reports once device
// (its name as the endpoint's errors give it: `afpacket: interface "veth0"`,
// `tun tun0`) is gone, because of cause (the failed system call, with its
// errno). errors.Is matches it against link.ErrDeviceGone and against
// cause; its message says what to do.
func DeviceGone(device string, cause error) error {
	return fmt.Errorf("%s: %w (%w): close the endpoint, and open it again once the device exists", device, link.ErrDeviceGone, cause)
}
