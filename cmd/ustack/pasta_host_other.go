//go:build !linux

package main

import "github.com/ustack-dev/ustack/sandbox"

// hostAddressing refuses: the host's routes are read through Linux's
// netlink.
func hostAddressing(ifname string) (v4, v6 *hostIface, err error) {
	return nil, nil, sandbox.ErrNotSupported
}
