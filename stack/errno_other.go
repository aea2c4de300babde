//go:build !linux

package stack

import "syscall"

// errNoNet is gVisor's ErrNoNet (an ICMP "source host isolated"): this
// system has no ENONET, so it is the nearest it has, the network being
// unreachable.
const errNoNet = syscall.ENETUNREACH
