package link

import "github.com/ustack-dev/ustack/cache"

// CacheReporter is implemented by link endpoints that keep per-endpoint
// buffer caches (afpacket, tun): what their caches of receive landing
// buffers and transmit scratch did, for an embedder (and the endpoints'
// tests) to read beside LinkStats, through any wrapper.
type CacheReporter interface {
	// CacheStats returns a snapshot of the endpoint's cache counters, summed
	// over its queues. Safe to call from any goroutine at any time.
	CacheStats() cache.Stats
}

// ErrReporter is implemented by link endpoints that can fail for good
// (afpacket, tun): Err returns nil while the endpoint works and, once its
// device is gone, an error that matches ErrDeviceGone (errors.Is), so
// that its owner (an embedder; the integration tests) closes the endpoint
// and opens it again once the device is back.
type ErrReporter interface {
	// Err returns why the endpoint stopped for good, or nil. Safe to call
	// from any goroutine at any time, including after Close.
	Err() error
}
