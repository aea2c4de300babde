package sandbox

import "golang.org/x/sys/unix"

// sioCINQ asks a socket how many bytes it holds to read (for UDP: the
// size of the next datagram).
const sioCINQ = unix.SIOCINQ
