//go:build race

package forward

// The race detector slows the stack about tenfold; the data path exercised
// is the same with less data.
const shutdownSize = 8 << 20
