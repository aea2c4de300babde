//go:build !race

package forward

// shutdownSize is what each direction of the transfer that Shutdown lets
// finish carries.
const shutdownSize = 64 << 20

// raceEnabled says that the tests run under the race detector.
const raceEnabled = false
