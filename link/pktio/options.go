package pktio

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

const (
	// DefaultMTU is wireguard-go's default MTU (device.DefaultMTU): 1500
	// less the 80 bytes of an IPv6 outer header, UDP and WireGuard's own.
	DefaultMTU = 1420
	// MinMTU is the smallest MTU: IPv6 requires 1280 on every link.
	MinMTU = header.IPv6MinimumMTU
	// MaxMTU is the largest IPv4 packet.
	MaxMTU = 1<<16 - 1
	// DefaultQueueLen is the length, in packets, of each of the two
	// queues (towards the consumer and towards the stack): 1024, as
	// wireguard-go's tun/netstack gives gVisor's channel endpoint, and
	// netdev_max_backlog (1000) rounded up to a power of two.
	DefaultQueueLen = 1024
	// DefaultBatchSize is how many inbound packets one receive round
	// hands to GRO before it flushes: 128, wireguard-go's
	// conn.IdealBatchSize, the batch a wireguard-go device writes.
	DefaultBatchSize = 128
	// GSOMaxSize is the largest super-segment the stack may hand the
	// endpoint: 64 KiB, Linux's default gso_max_size (GSO_LEGACY_MAX_SIZE),
	// which gVisor's TCP keeps within an IPv4 total length.
	GSOMaxSize = 1 << 16
)

// Options configures New. A nil *Options means the defaults; in a
// non-nil one a zero number means its default, and the booleans are off
// by default (each names the feature it turns off or the mode it asks
// for).
type Options struct {
	// MTU is the link MTU, from MinMTU to MaxMTU: the largest packet Read
	// hands out unless VNetHeader is set.
	MTU uint32
	// QueueLen is the length in packets of the queue towards the consumer
	// and of the one towards the stack.
	QueueLen int
	// BatchSize is the most queued inbound packets one receive round
	// delivers (and GRO coalesces) at a time. A Write delivered in the
	// writer's goroutine is one round, whatever its length.
	BatchSize int
	// NoGRO turns receive coalescing off: every written packet climbs the
	// stack on its own.
	NoGRO bool
	// NoGSO turns TSO off: the stack then cuts TCP to the MTU itself and
	// Read only copies.
	NoGSO bool
	// VNetHeader says the consumer takes super-packets: every packet Read
	// hands out starts with a virtio-net header (package link/vnet) at
	// offset and is followed by the packet, a TSO super-segment whole
	// with a partial checksum for the consumer to complete, as a TUN with
	// IFF_VNET_HDR hands them to the kernel; and every packet Write takes
	// starts with one too.
	VNetHeader bool
}

func (o *Options) normalize() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.MTU == 0 {
		r.MTU = DefaultMTU
	}
	if r.QueueLen == 0 {
		r.QueueLen = DefaultQueueLen
	}
	if r.BatchSize == 0 {
		r.BatchSize = DefaultBatchSize
	}
	switch {
	case r.MTU < MinMTU || r.MTU > MaxMTU:
		return r, fmt.Errorf("pktio: MTU %d out of range: use %d to %d", r.MTU, MinMTU, MaxMTU)
	case r.QueueLen < 1:
		return r, fmt.Errorf("pktio: queue length %d: must be positive", r.QueueLen)
	case r.BatchSize < 1:
		return r, fmt.Errorf("pktio: batch size %d: must be positive", r.BatchSize)
	}
	return r, nil
}
