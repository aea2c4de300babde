package mem

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

const (
	// DefaultRingSize is the per-direction ring length in packets: 1024,
	// netdev_max_backlog (1000, the per-CPU backlog a Linux veth without XDP
	// delivers into) rounded up to a power of two. A ring much shorter than
	// a TCP window turns bursts into local drops, which gVisor's TCP
	// recovers from slowly; 256 (veth's XDP ring) showed RTO stalls in a
	// single 64 MiB transfer.
	DefaultRingSize = 1024
	// DefaultBatchSize is how many packets the device goroutine delivers per
	// round. 64 is NAPI_POLL_WEIGHT, the per-poll budget of a Linux driver.
	DefaultBatchSize = 64
	// DefaultMTU is Ethernet's.
	DefaultMTU = 1500
	// MaxMTU is the largest MTU: the largest IPv4 packet.
	MaxMTU = math.MaxUint16
	// MinMTU is the smallest MTU: IPv6 requires 1280 on every link, and a
	// smaller one would make IPv6 unusable on the pair.
	MinMTU = header.IPv6MinimumMTU
	// DefaultGSOMaxSize is the largest super-segment with GSO on: gVisor's
	// own software GSO limit (64 KiB), which keeps every TCP super-segment
	// within an IPv4 total length.
	DefaultGSOMaxSize = stack.GVisorGSOMaxSize
)

// Options configures a Pair. Use DefaultOptions and change what you need;
// in a non-nil Options a zero RingSize, BatchSize, MTU or GSOMaxSize means
// its default, while the booleans are taken as they are.
type Options struct {
	// RingSize is the length of each direction's ring in packets.
	RingSize int
	// BatchSize is the most packets a device goroutine delivers per round.
	BatchSize int
	// MTU of both endpoints, from MinMTU to MaxMTU.
	MTU uint32
	// ChecksumOffload makes both endpoints claim TX and RX checksum offload,
	// as veth and TUN with a virtio-net header do: the stacks then neither
	// compute nor verify transport checksums.
	ChecksumOffload bool
	// GSO lets TCP hand the link super-segments of up to GSOMaxSize bytes,
	// carried whole to the peer (TSO on one side, GRO on the other). It
	// needs ChecksumOffload, as it does on real devices.
	GSO bool
	// GSOMaxSize is the largest super-segment when GSO is on.
	GSOMaxSize uint32
	// TXCost is a busy cost charged to the writer, modelling a syscall.
	TXCost TXCost
}

// DefaultOptions returns the options a nil *Options stands for: a
// 1500-byte MTU with checksum offload, no GSO, no TX cost.
func DefaultOptions() Options {
	return Options{
		RingSize:        DefaultRingSize,
		BatchSize:       DefaultBatchSize,
		MTU:             DefaultMTU,
		ChecksumOffload: true,
		GSOMaxSize:      DefaultGSOMaxSize,
	}
}

// Validate checks o as Pair would, without building anything.
func (o *Options) Validate() error {
	_, err := o.normalize()
	return err
}

// normalize fills defaults into a copy of o and checks it.
func (o *Options) normalize() (Options, error) {
	if o == nil {
		return DefaultOptions(), nil
	}
	r := *o
	if r.RingSize == 0 {
		r.RingSize = DefaultRingSize
	}
	if r.BatchSize == 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.MTU == 0 {
		r.MTU = DefaultMTU
	}
	if r.GSOMaxSize == 0 {
		r.GSOMaxSize = DefaultGSOMaxSize
	}
	switch {
	case r.RingSize < 1:
		return r, fmt.Errorf("mem: ring size %d: must be at least 1", r.RingSize)
	case r.BatchSize < 1:
		return r, fmt.Errorf("mem: batch size %d: must be at least 1", r.BatchSize)
	case r.MTU < MinMTU || r.MTU > MaxMTU:
		return r, fmt.Errorf("mem: MTU %d: must be from %d to %d", r.MTU, MinMTU, MaxMTU)
	case r.GSO && !r.ChecksumOffload:
		return r, errors.New("mem: GSO needs checksum offload: a super-segment carries a partial checksum that only an offloading device completes")
	case r.GSO && (r.GSOMaxSize < r.MTU || r.GSOMaxSize > DefaultGSOMaxSize):
		return r, fmt.Errorf("mem: GSO max size %d: must be from the MTU (%d) to %d", r.GSOMaxSize, r.MTU, DefaultGSOMaxSize)
	case r.TXCost.Call < 0 || r.TXCost.Packet < 0:
		return r, fmt.Errorf("mem: TX cost %v: must not be negative", r.TXCost)
	}
	return r, nil
}

// TXCost is a busy cost charged in the writer's goroutine on every
// WritePackets call, standing for the syscall a real link would make: Call
// once per call, plus Packet for each packet in it. It lets an in-process
// benchmark show what batching saves on a real device.
type TXCost struct {
	Call, Packet time.Duration
}

// String formats c as ParseTXCost reads it.
func (c TXCost) String() string { return c.Call.String() + "," + c.Packet.String() }

// IsZero reports whether c charges nothing.
func (c TXCost) IsZero() bool { return c.Call == 0 && c.Packet == 0 }

// ParseTXCost reads "CALL,PACKET", two Go durations such as "2us,100ns".
// A single duration is the per-call cost alone.
func ParseTXCost(s string) (TXCost, error) {
	callS, pktS, two := strings.Cut(s, ",")
	var c TXCost
	var err error
	if c.Call, err = time.ParseDuration(strings.TrimSpace(callS)); err != nil {
		return TXCost{}, fmt.Errorf("TX cost %q: want CALL,PACKET durations such as 2us,100ns: %w", s, err)
	}
	if two {
		if c.Packet, err = time.ParseDuration(strings.TrimSpace(pktS)); err != nil {
			return TXCost{}, fmt.Errorf("TX cost %q: want CALL,PACKET durations such as 2us,100ns: %w", s, err)
		}
	}
	if c.Call < 0 || c.Packet < 0 {
		return TXCost{}, fmt.Errorf("TX cost %q: durations must not be negative", s)
	}
	return c, nil
}

// spin burns the cost of one call carrying n packets. It spins rather
// than sleeps because a syscall occupies its thread: a sleeping goroutine
// would hand the CPU to others and make the link look cheaper than it is.
func (c TXCost) spin(n int) {
	d := c.Call + time.Duration(n)*c.Packet
	if d <= 0 {
		return
	}
	for start := time.Now(); time.Since(start) < d; {
	}
}
