//go:build race

package wgnet_test

// transferSize is what each direction carries in the transfer tests: 16
// MiB under the race detector, which slows both ends of the tunnel (the
// stacks and wireguard-go's crypto) five to ten times, so that 64 MiB
// each way took 35 s to over 43 s on a loaded two-core machine and ran
// past xfer.Timeout's bound, a limit for hangs, not for slowness.
const transferSize = 16 << 20
