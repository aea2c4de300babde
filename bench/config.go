package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// Test names.
const (
	UDPStream = "udp_stream"
	TCPStream = "tcp_stream"
	TCPRR     = "tcp_rr"
	UDPRR     = "udp_rr"
)

// Tests lists the test names in the order tables report them.
func Tests() []string { return []string{UDPStream, TCPStream, TCPRR, UDPRR} }

// Links lists the link names a benchmark can run on:
//
//   - mem: two ustack hosts in this process (no privileges).
//   - veth: ustack on AF_PACKET at one end of a veth pair, the Linux stack
//     at the other, each end in a network namespace the bench creates.
//   - tun: ustack on a TUN device, the Linux stack on its kernel side.
//   - kveth: the Linux stack at both ends of a veth pair: the baseline
//     ustack's veth numbers are compared with.
//   - wg-netstack: two wireguard-go devices in this process, joined in
//     memory, with wireguard-go's own netstack (gVisor, no qdisc) behind
//     each: the baseline of wg (no privileges).
//   - wg: the same tunnel with ustack (package wgnet) behind each device
//     (no privileges).
//
// veth, tun and kveth need root (CAP_SYS_ADMIN and CAP_NET_ADMIN). The
// baseline comes before what is compared with it, so that -link all's
// vs_first column compares wg with wg-netstack (see Ratio).
func Links() []string { return []string{"mem", "veth", "tun", "kveth", LinkWGNetstack, LinkWG} }

// KernelQdisc is the qdisc column of kveth cells: the kernel's own.
const KernelQdisc = "kernel"

// DefaultSize returns a test's message size when Config.Size is 0.
func DefaultSize(test string) int {
	switch test {
	case UDPStream:
		return 120 // netperf -t UDP_STREAM -- -m 120
	case TCPStream:
		return 16384 // netperf TCP_STREAM's send size on Linux
	default:
		return 1 // netperf's rr default: one-byte request and response
	}
}

// MaxUDPSize is the largest UDP payload: an IPv4 datagram of 65535 bytes
// less its IP and UDP headers.
const MaxUDPSize = 65535 - 20 - 8

// MaxSessions bounds -senders: each session costs goroutines and sockets on
// both hosts.
const MaxSessions = 10000

// Config is one benchmark cell: one test, on one link, with one qdisc and
// one number of senders.
type Config struct {
	Test  string
	Link  string
	Qdisc string
	// BusyPoll is the ustack hosts' busy polling (package poll).
	BusyPoll poll.Mode
	// Cache turns the ustack hosts' buffer caches on or off: their conns'
	// scratch (stack.Options.Cache) and their device endpoints' caches
	// (afpacket and tun NoCache). CacheDefault means each one's default.
	Cache    stack.CacheMode
	Senders  int
	Size     int // message size in bytes; 0 means DefaultSize(Test)
	Duration time.Duration
	// Mem configures the mem link; nil means mem.DefaultOptions.
	Mem *mem.Options
	// QdiscOptions tunes both NICs' qdisc; nil means its defaults.
	QdiscOptions *sched.Options
	// Reverse puts the Linux stack on the client side (veth, tun, kveth):
	// ustack then receives the stream and answers the requests.
	Reverse bool
	// MTU of a device link (veth, tun, kveth), or of the wire a WireGuard
	// link's tunnel would run over (wg, wg-netstack: the TUNs get
	// wgOverhead less); 0 means 1500.
	MTU int
	// Impair injects faults (package impair): on a device link (veth,
	// tun) around ustack's device endpoint, both directions; on mem around
	// each host's endpoint, on what it receives.
	Impair link.Impairments
	// AFPacket and Tun tune the device endpoints; nil means defaults.
	AFPacket *afpacket.Options
	Tun      *tun.Options
	// NoOffload runs a device link without offloads at both ends:
	// ustack's endpoint without the virtio-net header (afpacket and tun
	// NoOffload), and the kernel's veth ends (kveth's two, veth's kernel
	// end) without segmentation, receive coalescing, scatter-gather and
	// transmit checksumming, so that the kernel too sends and receives
	// packets of at most the MTU. kveth is then the kernel's own rate
	// without offloads, the baseline for ustack's.
	NoOffload bool
	// TCP tunes the TCP of the ustack hosts the bench builds (mem, veth,
	// tun; wg's hosts are wgnet's own); nil means stack.DefaultTCPOptions.
	// DelayedACK -1 there gives gVisor's stock ACKs, for comparison.
	TCP *stack.TCPOptions
}

func (c Config) mtu() int {
	if c.MTU > 0 {
		return c.MTU
	}
	return 1500
}

func (c Config) size() int {
	if c.Size > 0 {
		return c.Size
	}
	return DefaultSize(c.Test)
}

// String names the cell for progress lines and errors.
func (c Config) String() string {
	s := fmt.Sprintf("%s/%s/%s", c.Test, c.Link, c.Qdisc)
	if c.BusyPoll.Kind != poll.Off {
		s += fmt.Sprintf("/busypoll=%v", c.BusyPoll)
	}
	if c.Cache != stack.CacheDefault {
		s += "/cache=" + c.Cache.String()
	}
	return fmt.Sprintf("%s/%d", s, c.Senders)
}

// Validate checks a cell and says what is valid when it is not.
func (c Config) Validate() error {
	if !slices.Contains(Tests(), c.Test) {
		return fmt.Errorf("unknown test %q: valid tests are %s", c.Test, strings.Join(Tests(), ", "))
	}
	if !slices.Contains(Links(), c.Link) {
		return fmt.Errorf("unknown link %q: valid links are %s", c.Link, strings.Join(Links(), ", "))
	}
	if c.Link == "kveth" {
		if c.Qdisc != KernelQdisc {
			return fmt.Errorf("link kveth runs the kernel's qdisc, not %q", c.Qdisc)
		}
	} else if !sched.Known(c.Qdisc) {
		return &sched.UnknownError{Name: c.Qdisc}
	}
	if c.Link == LinkWGNetstack && c.Qdisc != sched.None {
		return fmt.Errorf("link %s runs wireguard-go's netstack, which has no qdisc (%s), not %q", LinkWGNetstack, sched.None, c.Qdisc)
	}
	if err := c.BusyPoll.Check(); err != nil {
		return err
	}
	if (c.Link == "kveth" || c.Link == LinkWGNetstack) && c.BusyPoll.Kind != poll.Off {
		return fmt.Errorf("link %s has no ustack host to busy poll", c.Link)
	}
	if (c.Link == "mem" || isWG(c.Link)) && c.Reverse {
		return fmt.Errorf("reverse needs a kernel end: use link veth, tun or kveth")
	}
	if isWG(c.Link) {
		if c.Impair.Active() {
			return fmt.Errorf("link %s takes no impairments: its wire is wireguard-go's in-memory bind", c.Link)
		}
		if m := c.mtu() - wgOverhead; m < pktio.MinMTU || m > pktio.MaxMTU {
			return fmt.Errorf("mtu %d: link %s's TUNs get %d less, which must be from %d to %d: use an MTU from %d to %d",
				c.mtu(), c.Link, wgOverhead, pktio.MinMTU, pktio.MaxMTU, pktio.MinMTU+wgOverhead, pktio.MaxMTU+wgOverhead)
		}
	}
	if c.Senders < 1 || c.Senders > MaxSessions {
		return fmt.Errorf("senders %d: must be from 1 to %d", c.Senders, MaxSessions)
	}
	if c.Size < 0 {
		return fmt.Errorf("size %d: must not be negative", c.Size)
	}
	if (c.Test == UDPStream || c.Test == UDPRR) && c.size() > MaxUDPSize {
		return fmt.Errorf("size %d: a UDP datagram carries at most %d bytes", c.size(), MaxUDPSize)
	}
	if c.Test == UDPStream && c.size() < 1 {
		return fmt.Errorf("size %d: udp_stream needs at least 1 byte to mark measured datagrams", c.size())
	}
	if c.Duration < 10*time.Millisecond {
		return fmt.Errorf("duration %v: must be at least 10ms", c.Duration)
	}
	return nil
}

// Plan is a whole run: every combination of its tests, qdiscs and sender
// counts, each repeated Count times in alternation.
type Plan struct {
	Tests []string
	// Links are the links to run on, alternated like every other
	// dimension, so that ustack and the kernel baseline share one run.
	Links  []string
	Qdiscs []string
	// BusyPolls are the busy polling modes to compare; nil means off only.
	BusyPolls []poll.Mode
	// Caches are the buffer cache settings to compare; nil means the
	// default only.
	Caches   []stack.CacheMode
	Senders  []int
	Size     int
	Duration time.Duration
	// Count is how many times each cell runs; the result is the median.
	// 0 means AutoCount.
	Count        int
	Mem          *mem.Options
	QdiscOptions *sched.Options
	Reverse      bool
	MTU          int
	Impair       link.Impairments
	AFPacket     *afpacket.Options
	Tun          *tun.Options
	NoOffload    bool
	TCP          *stack.TCPOptions
}

// Cells returns the plan's configurations in report order: by link, then
// test, then qdisc, then busy polling mode, then senders, then cache
// setting (so that a cache off/on pair sits side by side). A kveth link
// runs once per test and senders, with the kernel's qdisc, no busy polling
// and no cache setting (it has no ustack host); so does wg-netstack, with
// no qdisc (sched.None).
func (p Plan) Cells() []Config {
	var cells []Config
	for _, l := range p.Links {
		qdiscs := p.Qdiscs
		noUstack := l == "kveth" || l == LinkWGNetstack
		switch l {
		case "kveth":
			qdiscs = []string{KernelQdisc}
		case LinkWGNetstack:
			qdiscs = []string{sched.None}
		}
		polls := p.BusyPolls
		if len(polls) == 0 || noUstack {
			polls = []poll.Mode{{}}
		}
		caches := p.Caches
		if len(caches) == 0 || noUstack {
			caches = []stack.CacheMode{stack.CacheDefault}
		}
		for _, t := range p.Tests {
			for _, q := range qdiscs {
				for _, bp := range polls {
					for _, n := range p.Senders {
						for _, cm := range caches {
							cells = append(cells, Config{Test: t, Link: l, Qdisc: q, BusyPoll: bp, Cache: cm, Senders: n, Size: p.Size, Duration: p.Duration,
								Mem: p.Mem, QdiscOptions: p.QdiscOptions, Reverse: p.Reverse, MTU: p.MTU, Impair: p.Impair, AFPacket: p.AFPacket, Tun: p.Tun, NoOffload: p.NoOffload, TCP: p.TCP})
						}
					}
				}
			}
		}
	}
	return cells
}

// Validate checks every cell of the plan.
func (p Plan) Validate() error {
	if len(p.Links) == 0 || len(p.Tests) == 0 || len(p.Qdiscs) == 0 || len(p.Senders) == 0 {
		return fmt.Errorf("a plan needs at least one link, test, qdisc and sender count")
	}
	if p.Count < 0 {
		return fmt.Errorf("count %d: must be at least 1", p.Count)
	}
	for _, c := range p.Cells() {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Budget is the wall time AutoCount aims to keep a run within, so that a
// bare `ustack bench` finishes within 90 seconds on a 2-core machine.
const Budget = 75 * time.Second

// cellOverhead estimates what a cell costs beyond its window: warm-up,
// drain, building and closing two hosts.
func cellOverhead(d time.Duration) time.Duration { return warmup(d) + 150*time.Millisecond }

// AutoCount returns the repeat count used when Plan.Count is 0: as many
// repeats as fit in Budget, from 1 to 3 (three gives a real median).
func (p Plan) AutoCount() int {
	per := time.Duration(len(p.Cells())) * (p.Duration + cellOverhead(p.Duration))
	if per <= 0 {
		return 1
	}
	return max(1, min(3, int(Budget/per)))
}

// Estimate returns how long the plan should take.
func (p Plan) Estimate() time.Duration {
	count := p.Count
	if count == 0 {
		count = p.AutoCount()
	}
	return time.Duration(count*len(p.Cells())) * (p.Duration + cellOverhead(p.Duration))
}

// warmup is how long a cell runs before its window opens: long enough for
// every session to be running and TCP to leave slow start.
func warmup(d time.Duration) time.Duration {
	return min(max(d/10, 50*time.Millisecond), 500*time.Millisecond)
}
