package link

import "errors"

// ErrDeviceGone is matched (errors.Is) by the Err of a device endpoint
// (link/afpacket, link/tun) once the device under it is gone: deleted, or
// its network namespace destroyed. Nothing more is received or sent; the
// endpoint is to be closed, and opened again once the device exists.
var ErrDeviceGone = errors.New("the device is gone")
