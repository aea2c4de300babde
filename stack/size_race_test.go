//go:build race

package stack_test

// The race detector slows the stack about tenfold; the data path exercised
// is the same with less data.
const (
	transferSize = 8 << 20
	impairedSize = 2 << 20
)
