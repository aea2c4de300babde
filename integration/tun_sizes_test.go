//go:build linux

package integration

// tunTransferSize is what each direction of a per-qdisc TUN transfer
// carries: 256 MiB, as the issue asks. tunSmallSize is for the tests that
// vary the endpoint (offloads, queues) rather than the qdisc. Both shrink
// under the race detector.
var (
	tunTransferSize = sized(256 << 20)
	tunSmallSize    = sized(64 << 20)
)
