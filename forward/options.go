package forward

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

const (
	// DefaultMaxFlows bounds the flows of all protocols at once. Each
	// costs its buffers (see MemoryBudget), a goroutine or two while
	// active (a TCP flow relayed to a host socket none while idle) and,
	// with Relay over host sockets, a descriptor: 8192 stays below common
	// descriptor limits.
	DefaultMaxFlows = 8192
	// DefaultMaxTCP and DefaultMaxUDP bound each protocol's share.
	DefaultMaxTCP = 4096
	DefaultMaxUDP = 4096
	// DefaultMaxHalfOpen bounds the TCP handshakes that count (see
	// Options.MaxHalfOpen): Linux's default tcp_max_syn_backlog is 128
	// to 1024 by memory; 256 is in that range.
	DefaultMaxHalfOpen = 256
	// DefaultSlowHandshake is how long a handshake (SYN to the handler's
	// answer) may take before it counts as one whose destination does not
	// answer: RFC 6298's initial retransmission timeout, 1 s, after which
	// the peer's own stack takes its SYN (or our SYN-ACK) for lost. A
	// destination anywhere on Earth answers a connect sooner; a dial
	// through a proxy takes two round trips, still well below it.
	DefaultSlowHandshake = time.Second
	// DefaultMemoryBudget bounds the buffers all flows may hold at once,
	// as Linux's tcp_mem bounds socket memory. A flow reserves its worst
	// case when it opens (a TCP flow its send and receive buffers at their
	// largest, a UDP flow its queue), so this is a bound, not a use: 8 GiB
	// is 512 TCP flows at the stack's default largest buffers (8 MiB each
	// way, stack.DefaultTCPOptions), which is then the tighter bound of
	// the two, not DefaultMaxTCP; a smaller TCPBuffer admits more.
	DefaultMemoryBudget = 8 << 30
	// DefaultUDPIdleTimeout ends a UDP flow after this long without a
	// datagram either way: Linux conntrack keeps a UDP stream 120 s and a
	// one-way exchange 30 s; 60 s sits between.
	DefaultUDPIdleTimeout = 60 * time.Second
	// DefaultUDPQueue is how many bytes of datagrams a UDP flow holds for
	// a handler that has not read them yet: Linux's default socket receive
	// buffer (net.core.rmem_default, 212992).
	DefaultUDPQueue = 212992
)

// Options configures New. A nil *Options, or a zero field, means the
// documented default; for the limits, negative means none.
type Options struct {
	// MaxFlows bounds flows of all protocols at once (DefaultMaxFlows);
	// MaxTCP and MaxUDP each protocol's (DefaultMaxTCP, DefaultMaxUDP).
	MaxFlows, MaxTCP, MaxUDP int
	// MaxHalfOpen bounds the TCP handshakes (SYN received, not yet
	// accepted or rejected) that count (DefaultMaxHalfOpen): those to a
	// destination that has not shown it answers, and any that has taken
	// longer than SlowHandshake. Each handshake to a destination answered
	// within SlowHandshake lets two more to it run uncounted, so a burst
	// of connects to a live server is never refused. One destination
	// holds a quarter of the counted handshakes at most, one peer (source
	// address) half. A handshake that finds no room waits for it, up to
	// SlowHandshake, and is then refused with a reset (HalfOpen); MaxTCP
	// handshakes wait at most, each holding a goroutine and its SYN but
	// no flow. See the package doc.
	MaxHalfOpen int
	// SlowHandshake is how long a handshake may take before it counts
	// against MaxHalfOpen whatever its destination, and how long one
	// waits for room (DefaultSlowHandshake). Negative means the strict
	// limit: every handshake counts from its SYN, and one that finds no
	// room is refused at once.
	SlowHandshake time.Duration
	// TCPBuffer caps each TCP flow's send and receive buffer in bytes.
	// Zero means the stack's own maxima (stack.TCPOptions), which keeps
	// gVisor's buffer auto-tuning; a smaller value is set on each flow,
	// which fixes its buffers at that size.
	TCPBuffer int
	// MemoryBudget bounds the buffers reserved by open flows, in bytes
	// (DefaultMemoryBudget); a flow that would exceed it is refused
	// (Budget).
	MemoryBudget int64
	// UDPIdleTimeout ends a UDP flow idle this long
	// (DefaultUDPIdleTimeout).
	UDPIdleTimeout time.Duration
	// UDPQueue bounds the bytes of datagrams a UDP flow holds unread
	// (DefaultUDPQueue); more are dropped and counted (UDPDropped).
	UDPQueue int
	// NICs are the NICs whose traffic is forwarded (promiscuous and
	// spoofing mode on); nil means every NIC the stack has at New.
	NICs []tcpip.NICID
}

const unlimited = int(^uint(0) >> 1)

// normalized fills in the defaults.
func (o Options) normalized() Options {
	limit := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = unlimited
		}
	}
	limit(&o.MaxFlows, DefaultMaxFlows)
	limit(&o.MaxTCP, DefaultMaxTCP)
	limit(&o.MaxUDP, DefaultMaxUDP)
	limit(&o.MaxHalfOpen, DefaultMaxHalfOpen)
	limit(&o.UDPQueue, DefaultUDPQueue)
	switch {
	case o.MemoryBudget == 0:
		o.MemoryBudget = DefaultMemoryBudget
	case o.MemoryBudget < 0:
		o.MemoryBudget = int64(^uint64(0) >> 1)
	}
	if o.SlowHandshake == 0 {
		o.SlowHandshake = DefaultSlowHandshake
	}
	if o.UDPIdleTimeout <= 0 {
		o.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	return o
}
