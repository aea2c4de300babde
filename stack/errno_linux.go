package stack

import "syscall"

// errNoNet is gVisor's ErrNoNet (an ICMP "source host isolated") as
// Linux gives it.
const errNoNet = syscall.ENONET
