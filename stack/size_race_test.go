//go:build race

package stack_test

// The race detector slows the stack about tenfold; the data path exercised
// is the same with less data.
const (
	transferSize = 8 << 20
	impairedSize = 2 << 20
)

// allocSlack is how far a conn's allocations per call may exceed the
// endpoint's own in TestConnCacheAddsNoAllocs: under the race detector
// sync.Pool drops a quarter of what is put back, so gVisor's own count
// wanders by one (and testing.AllocsPerRun truncates it to a whole).
const allocSlack = 1.2
