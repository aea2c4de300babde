package stack

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/ustack-dev/ustack/poll"
)

// Options configures New. A nil *Options means the defaults.
type Options struct {
	// TCP tunes TCP; nil means DefaultTCPOptions.
	TCP *TCPOptions
	// Routing makes the stack route IPv4 and IPv6 packets between its NICs
	// (what Linux calls IP forwarding), for hosts that route (a gateway, a
	// VPN endpoint). Routed packets leave as they
	// came: AddNIC turns the link's receive coalescing off
	// (link.Coalescer), since a merged segment is larger than the MTU and
	// gVisor drops a routed packet it would have to fragment (answering
	// with ICMP "fragmentation needed"), and the delayed ACK holds none of
	// them. The host's own TCP then goes without GRO too. A tun device
	// is asked for no offloads then, so the kernel segments and checksums
	// what it hands over; segments other links receive already merged are
	// not cut again: give a routing stack links that receive MTU-sized
	// packets (pktio without VNetHeader, an AF_PACKET interface whose peer
	// has TSO and GSO off; tun unless its offloads were Inherited).
	Routing bool
	// UDPRecvErr sets IP_RECVERR (and IPV6_RECVERR) on every UDP socket the
	// stack makes, so that a datagram refused by a full NIC queue fails its
	// write with ENOBUFS and the writer can retry. Off by default, as in
	// Linux, where such a datagram is dropped and the write still succeeds;
	// the drop is counted either way (NICs.TxPacketsDroppedNoBufferSpace).
	// With it on, ICMP errors also queue on the socket's error queue.
	UDPRecvErr bool
	// UDPWait is how long a UDP socket's write that a full NIC queue
	// refused waits for room before it gives up, as a Linux socket waits
	// for send buffer: it waits for the qdisc's room signal
	// (sched.RoomNotifier) and retries. 0 means DefaultUDPWait; a negative
	// value never waits (the write is refused at once). The wait is in the
	// writer's goroutine, above the qdisc, which itself never waits: a
	// routing stack's receive loop and TCP's goroutines are refused at
	// once. A write still refused when the wait is over fails with ENOBUFS
	// under UDPRecvErr, and is otherwise dropped, counted, as Linux drops it.
	UDPWait time.Duration
	// BusyPoll makes a reader whose conn has nothing to read poll the
	// stack's links from its own goroutine for a while before it parks
	// (package poll). The zero value, off, is the default: whether it pays
	// depends on idle cores, see the README's busy polling results.
	BusyPoll poll.Mode
	// Transparent makes a stack that terminates flows to any address, as a
	// transparent proxy does: package forward (forward.New) needs it, and
	// nothing else should set it. Its NICs run in promiscuous mode (as
	// package sandbox runs them), and packets to the stack's own addresses
	// go out of the NIC rather than being delivered locally, because with
	// local delivery on gVisor takes every source address on a promiscuous
	// NIC for one of its own and drops the packet as a martian.
	Transparent bool
	// Cache says whether the stack's conns keep their read and write
	// scratch (see CacheMode); CacheDefault means DefaultCache. The links'
	// own caches are their options' (afpacket.Options.NoCache,
	// tun.Options.NoCache).
	Cache CacheMode
	// DNS lists the DNS servers that Resolver, and DialContext for host
	// names, ask through this stack, on port 53, first one first (see
	// Resolver). Empty means names cannot be resolved: dial addresses.
	DNS []netip.Addr
	// Lookup, if not nil, resolves the host names DialContext and Listen
	// are given, in place of Resolver: for a stack whose names resolve
	// elsewhere (package wgnet resolves them as wireguard-go's netstack
	// does). network is "ip", "ip4" or "ip6"; the addresses are tried in
	// the order returned. Resolver itself still asks DNS.
	Lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DefaultUDPWait is what a zero Options.UDPWait stands for: long enough
// for a qdisc's runner to send a few batches on any link we have (a batch
// leaves in well under a millisecond), short enough that a dead link shows
// as ENOBUFS soon. At 64 udp_stream senders it takes refusals from over
// half of all attempts to a fraction of a percent (see the README).
const DefaultUDPWait = 100 * time.Millisecond

// CacheMode turns the stack's buffer caching on or off.
type CacheMode uint8

const (
	// CacheDefault is DefaultCache.
	CacheDefault CacheMode = iota
	// CacheOn: each conn keeps its own read and write scratch and waiter
	// entries (what gVisor's gonet adapters allocate per call), so a read
	// that finds data, a write that finds room and a wait allocate
	// nothing in our layer.
	CacheOn
	// CacheOff: each call allocates its scratch, as gonet's conns do; for
	// comparison.
	CacheOff
)

// DefaultCache is what CacheDefault stands for: on, as measured (see the
// README's buffer cache section).
const DefaultCache = CacheOn

// String returns "on" or "off" (CacheDefault as what it stands for).
func (m CacheMode) String() string {
	if m.On() {
		return "on"
	}
	return "off"
}

// On reports whether m means caching on.
func (m CacheMode) On() bool {
	if m == CacheDefault {
		m = DefaultCache
	}
	return m == CacheOn
}

// TCPOptions are the stack-wide TCP settings. gVisor's own defaults are
// what users of its peer projects (Tailscale, sing-tun, runsc) most often
// had to change; ours are spelled out here with their reasons, and set
// explicitly, so a gVisor upgrade cannot change them behind our back.
//
// A zero field means its default, field by field, as everywhere in
// ustack: &TCPOptions{MinRTO: 50 * time.Millisecond} changes the RTO
// floor and nothing else. So the settings that are on by default are
// named for turning them off.
type TCPOptions struct {
	// NoSACK turns selective acknowledgements (RFC 2018) off. They are on
	// by default, as in Linux: without them a single loss in a large
	// window costs a retransmission timeout or a slow, one-hole-per-RTT
	// recovery.
	NoSACK bool
	// CongestionControl is "cubic" or "reno"; "" means "cubic", Linux's
	// default (gVisor's stack defaults to reno, which grows the window
	// too slowly on high bandwidth-delay paths).
	CongestionControl string
	// NoRACK turns RACK-TLP loss detection (RFC 8985: time-based, robust
	// to reordering) off. It is on by default, as in Linux since 4.18.
	NoRACK bool
	// FixedReceiveBuffer keeps each connection's receive buffer at
	// ReceiveBuffer.Default. By default it grows with the measured
	// bandwidth-delay product, as Linux's tcp_moderate_rcvbuf does.
	FixedReceiveBuffer bool
	// Nagle delays small writes while data is unacknowledged. Default off,
	// as Go's net package sets TCP_NODELAY on every connection: request and
	// response protocols otherwise stall on delayed ACKs.
	Nagle bool
	// MinRTO is the floor of the retransmission timeout; 0 means 200 ms,
	// as in Linux and gVisor. On in-process or datacenter links with
	// sub-millisecond round trips a lower floor (Linux's per-route
	// rto_min) shortens the stall after a lost retransmission.
	MinRTO time.Duration
	// MaxRTO is the ceiling the retransmission timeout backs off to; 0
	// means 120 s, Linux's TCP_RTO_MAX and gVisor's. On a lossy link where
	// several losses in a row are likely, a lower ceiling bounds the stall
	// after them. At least MinRTO.
	MaxRTO time.Duration
	// DelayedACK is how long a NIC holds a pure ACK of a flow that has
	// shown itself request/response, for the flow's next segment to carry
	// it, as Linux's delayed ACK does (gVisor sends every ACK at once). 0
	// means DefaultDelayedACK; a negative value sends every ACK at once.
	// See ackDelayer for which ACKs are held.
	DelayedACK time.Duration
	// SendBuffer and ReceiveBuffer bound the per-connection buffers in
	// bytes; a zero field of either means its default: 4 KiB / 1 MiB /
	// 8 MiB for both. gVisor caps them at 4 MiB, which limits one
	// connection to 4 MiB per round trip (3.2 Gbit/s at 10 ms), the
	// ceiling Tailscale's users hit; 8 MiB is the largest of Linux's
	// default tcp_rmem/tcp_wmem maxima on current kernels and is only a
	// limit, not an allocation.
	SendBuffer, ReceiveBuffer BufferRange
}

// BufferRange is a buffer size range in bytes: the smallest a buffer may
// be set to, the size new connections start with, and the largest it may
// grow to. A zero field means its default.
type BufferRange struct {
	Min, Default, Max int
}

// The defaults of TCPOptions' durations and buffers.
const (
	defaultMinRTO        = 200 * time.Millisecond
	defaultBufferDefault = 1 << 20
	defaultBufferMax     = 8 << 20
)

// DefaultTCPOptions returns the TCP settings a nil Options.TCP, or a zero
// TCPOptions, stands for, every default spelled out.
func DefaultTCPOptions() TCPOptions {
	var o TCPOptions
	return o.normalized()
}

// normalized returns o with every zero field replaced by its default.
func (o TCPOptions) normalized() TCPOptions {
	if o.CongestionControl == "" {
		o.CongestionControl = "cubic"
	}
	if o.MinRTO == 0 {
		o.MinRTO = defaultMinRTO
	}
	if o.MaxRTO == 0 {
		o.MaxRTO = tcp.MaxRTO
	}
	if o.DelayedACK == 0 {
		o.DelayedACK = DefaultDelayedACK
	}
	o.SendBuffer = o.SendBuffer.normalized()
	o.ReceiveBuffer = o.ReceiveBuffer.normalized()
	return o
}

// normalized fills b's zero fields with their defaults. A zero Default
// stays within a Max given smaller than it.
func (b BufferRange) normalized() BufferRange {
	if b.Min == 0 {
		b.Min = tcp.MinBufferSize
	}
	if b.Max == 0 {
		b.Max = max(defaultBufferMax, b.Min, b.Default)
	}
	if b.Default == 0 {
		b.Default = min(max(defaultBufferDefault, b.Min), b.Max)
	}
	return b
}

func (b BufferRange) check(what string) error {
	if b.Min < tcp.MinBufferSize || b.Default < b.Min || b.Max < b.Default {
		return fmt.Errorf("TCP %s buffer %d/%d/%d: want %d <= min <= default <= max", what, b.Min, b.Default, b.Max, tcp.MinBufferSize)
	}
	return nil
}

// apply sets the options, normalized, on a stack's TCP protocol.
func (o *TCPOptions) apply(set func(tcpip.SettableTransportProtocolOption) tcpip.Error) error {
	n := o.normalized()
	if n.CongestionControl != "cubic" && n.CongestionControl != "reno" {
		return fmt.Errorf("TCP congestion control %q: valid values are cubic, reno", n.CongestionControl)
	}
	if n.MinRTO < 0 {
		return fmt.Errorf("TCP minimum RTO %v: must be positive", n.MinRTO)
	}
	if n.MaxRTO < n.MinRTO {
		return fmt.Errorf("TCP maximum RTO %v: must be at least the minimum RTO, %v", n.MaxRTO, n.MinRTO)
	}
	if err := n.SendBuffer.check("send"); err != nil {
		return err
	}
	if err := n.ReceiveBuffer.check("receive"); err != nil {
		return err
	}
	sack := tcpip.TCPSACKEnabled(!n.NoSACK)
	cc := tcpip.CongestionControlOption(n.CongestionControl)
	recovery := tcpip.TCPRecovery(0)
	if !n.NoRACK {
		recovery = tcpip.TCPRACKLossDetection
	}
	moderate := tcpip.TCPModerateReceiveBufferOption(!n.FixedReceiveBuffer)
	delay := tcpip.TCPDelayEnabled(n.Nagle)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: n.SendBuffer.Min, Default: n.SendBuffer.Default, Max: n.SendBuffer.Max}
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: n.ReceiveBuffer.Min, Default: n.ReceiveBuffer.Default, Max: n.ReceiveBuffer.Max}
	minRTO := tcpip.TCPMinRTOOption(n.MinRTO)
	maxRTO := tcpip.TCPMaxRTOOption(n.MaxRTO)
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &cc, &recovery, &moderate, &delay, &minRTO, &maxRTO, &snd, &rcv} {
		if err := set(opt); err != nil {
			return fmt.Errorf("set TCP option %T: %s", opt, err)
		}
	}
	return nil
}
