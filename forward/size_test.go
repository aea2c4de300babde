//go:build !race

package forward

// shutdownSize is what each direction of the transfer that Shutdown lets
// finish carries.
const shutdownSize = 64 << 20
