//go:build race

package forward

// The race detector slows the stack about tenfold; the data path exercised
// is the same with less data.
const shutdownSize = 8 << 20

// raceEnabled says that the tests run under the race detector.
const raceEnabled = true
