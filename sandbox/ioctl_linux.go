package sandbox

import "golang.org/x/sys/unix"

// sioCINQ asks a TCP socket how many bytes it holds to read.
const sioCINQ = unix.SIOCINQ
