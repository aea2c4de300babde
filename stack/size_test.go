//go:build !race

package stack_test

// transferSize is what each direction of a TCP transfer test carries;
// impairedSize is the same over a lossy link, where recovery makes it slow.
const (
	transferSize = 64 << 20
	impairedSize = 16 << 20
)

// allocSlack is how far a conn's allocations per call may exceed the
// endpoint's own in TestConnCacheAddsNoAllocs: nothing but rounding.
const allocSlack = 0.2
