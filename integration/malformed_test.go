//go:build linux

package integration

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/sched"
)

// badClass is one kind of bad input: gen returns the packets of its i-th
// instance (several for fragment classes).
type badClass struct {
	name string
	n    int
	gen  func(i int, r *rand.Rand) [][]byte
	// check asserts what the stack's counters must show after the class
	// was sent: d holds the deltas of every counter that moved.
	check func(t *testing.T, sent int, d counters)
}

// counters are stack counters by name: gVisor's by path, the link's as
// "link.<field>", the services' as "svc.<name>".
type counters map[string]int64

func (c counters) sum(names ...string) int64 {
	var s int64
	for _, n := range names {
		s += c[n]
	}
	return s
}

// background bounds the packets of the kernel's own that may arrive while
// a class is sent (neighbour discovery, multicast listener reports).
const background int64 = 4

// within asserts that a count is sent, give or take the kernel's own
// background packets.
func within(t *testing.T, got int64, sent int, msg string) {
	t.Helper()
	require.GreaterOrEqual(t, got, int64(sent), msg)
	require.LessOrEqual(t, got, int64(sent)+background, msg)
}

// linkDrops are the link counters of packets it took and dropped itself.
var linkDrops = []string{"link.RXBadChecksum", "link.RXMalformed", "link.RXErrors", "link.RXDetached"}

// rawSender returns a sender of crafted IP packets from the kernel's side
// of n's link (the veth end or the TUN device) to ustack's end.
func (n *srvNet) rawSender(tb testing.TB) *rawSender {
	tb.Helper()
	if n.kind == "tun" {
		return newRawSender(tb, n.k, "srvtun0", nil)
	}
	var dst net.HardwareAddr
	for _, info := range n.host.Stack().GVisor().NICInfo() {
		dst = net.HardwareAddr(info.LinkAddress)
	}
	require.Len(tb, dst, 6, "ustack's Ethernet address")
	return newRawSender(tb, n.k, "srvk0", dst)
}

func snapshot(n *srvNet) counters {
	st := n.host.Stack().Stats()
	c := counters{}
	for k, v := range st.GVisor {
		c[k] = int64(v)
	}
	l := st.NICs[0].Link
	for k, v := range map[string]uint64{
		"RXPackets": l.RXPackets, "RXBadChecksum": l.RXBadChecksum, "RXMalformed": l.RXMalformed,
		"RXErrors": l.RXErrors, "RXDetached": l.RXDetached,
	} {
		c["link."+k] = int64(v)
	}
	s := n.host.Services()
	c["svc.udp_echoed"] = int64(s.UDPEchoed.Load())
	c["svc.udp_discarded"] = int64(s.UDPDiscarded.Load())
	c["svc.accepted"] = int64(s.Accepted.Load())
	return c
}

func (c counters) minus(old counters) counters {
	d := counters{}
	for k, v := range c {
		if v != old[k] {
			d[k] = v - old[k]
		}
	}
	return d
}

func (c counters) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, c[k])
	}
	return b.String()
}

// badClasses lists the bad inputs, addressed from k4/k6 to ustack's u4/u6.
func badClasses(k4, u4, k6, u6 netip.Addr) []badClass {
	syn4 := func(r *rand.Rand, dport uint16) []byte {
		return ip4{src: k4, dst: u4, proto: unix.IPPROTO_TCP, id: uint16(r.Uint32())}.bytes(
			tcpSeg(k4, u4, uint16(20000+r.IntN(40000)), dport, r.Uint32(), 0, 0x02, 65535, nil))
	}
	udp4 := func(r *rand.Rand, dport uint16, payload []byte) []byte {
		return ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: uint16(r.Uint32())}.bytes(
			udpDgram(k4, u4, uint16(20000+r.IntN(40000)), dport, payload))
	}
	udp6 := func(r *rand.Rand, dport uint16, payload []byte) []byte {
		return ip6(k6, u6, unix.IPPROTO_UDP, udpDgram(k6, u6, uint16(20000+r.IntN(40000)), dport, payload))
	}
	noEcho := func(t *testing.T, sent int, d counters) {
		require.Zero(t, d["svc.udp_echoed"], "nothing malformed reached the echo service")
		require.Zero(t, d["TCP.PassiveConnectionOpenings"], "no connection opened")
	}
	// droppedAtLink: the link checks what the kernel did not vouch for
	// (frames from a packet socket carry no checksum verdict) and drops
	// it, counted by reason, before gVisor sees it.
	droppedAtLink := func(reasons ...string) func(t *testing.T, sent int, d counters) {
		return func(t *testing.T, sent int, d counters) {
			noEcho(t, sent, d)
			require.Equal(t, int64(sent), d.sum(reasons...), "dropped at the link for %v", reasons)
			require.LessOrEqual(t, d["IP.PacketsReceived"], background, "none reached gVisor")
		}
	}
	return []badClass{
		{name: "truncated", n: 400, gen: func(i int, r *rand.Rand) [][]byte {
			full := syn4(r, 80)
			if i%2 == 1 {
				full = udp6(r, 7, []byte("truncated"))
			}
			return [][]byte{full[:1+r.IntN(len(full)-1)]}
		}, check: droppedAtLink("link.RXMalformed", "link.RXBadChecksum")},
		{name: "wrong-length", n: 400, gen: func(i int, r *rand.Rand) [][]byte {
			if i%2 == 1 {
				p := udp6(r, 7, []byte("wrong length"))
				binary.BigEndian.PutUint16(p[4:], uint16(r.IntN(65536)))
				if int(binary.BigEndian.Uint16(p[4:])) == len(p)-40 {
					binary.BigEndian.PutUint16(p[4:], uint16(len(p)))
				}
				return [][]byte{p}
			}
			p := udp4(r, 7, []byte("wrong length"))
			var tl int
			switch i % 6 {
			case 0:
				tl = r.IntN(20) // shorter than the header
			case 2:
				tl = 20 + r.IntN(len(p)-20) // cuts the datagram
			default:
				tl = len(p) + 1 + r.IntN(2000) // longer than the packet
			}
			binary.BigEndian.PutUint16(p[2:], uint16(tl))
			fixIP4Checksum(p)
			return [][]byte{p}
		}, check: droppedAtLink("link.RXMalformed", "link.RXBadChecksum")},
		{name: "bad-ip-checksum", n: 300, gen: func(i int, r *rand.Rand) [][]byte {
			p := udp4(r, 7, []byte("bad ip checksum"))
			p[10] ^= byte(1 + r.IntN(255))
			return [][]byte{p}
		}, check: droppedAtLink("link.RXBadChecksum")},
		{name: "bad-l4-checksum", n: 300, gen: func(i int, r *rand.Rand) [][]byte {
			var p []byte
			switch i % 3 {
			case 0:
				p = syn4(r, 80)
				p[20+16] ^= 0x5a
			case 1:
				p = udp4(r, 7, []byte("bad udp checksum"))
				p[20+6] ^= 0x5a
			default:
				p = udp6(r, 7, []byte("bad udp checksum"))
				p[40+6] ^= 0x5a
			}
			return [][]byte{p}
		}, check: droppedAtLink("link.RXBadChecksum")},
		{name: "bad-l4-header", n: 300, gen: func(i int, r *rand.Rand) [][]byte {
			// Right checksums over wrong headers: these reach gVisor's
			// parsers.
			switch i % 3 {
			case 0: // TCP data offset below 5 or past the segment
				seg := tcpSeg(k4, u4, uint16(20000+r.IntN(40000)), 80, r.Uint32(), 0, 0x02, 65535, []byte("data"))
				seg[12] = []byte{0x00, 0x40, 0xf0, 0x80}[r.IntN(4)]
				l4(seg, k4, u4, unix.IPPROTO_TCP, 16)
				return [][]byte{ip4{src: k4, dst: u4, proto: unix.IPPROTO_TCP, id: uint16(r.Uint32())}.bytes(seg)}
			case 1: // UDP length field larger than the datagram
				d := udpDgram(k4, u4, uint16(20000+r.IntN(40000)), 7, []byte("udp length"))
				binary.BigEndian.PutUint16(d[4:], uint16(len(d)+1+r.IntN(1000)))
				l4(d, k4, u4, unix.IPPROTO_UDP, 6)
				return [][]byte{ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: uint16(r.Uint32())}.bytes(d)}
			default: // UDP length field below the header
				d := udpDgram(k6, u6, uint16(20000+r.IntN(40000)), 7, []byte("udp length"))
				binary.BigEndian.PutUint16(d[4:], uint16(r.IntN(8)))
				l4(d, k6, u6, unix.IPPROTO_UDP, 6)
				return [][]byte{ip6(k6, u6, unix.IPPROTO_UDP, d)}
			}
		}, check: func(t *testing.T, sent int, d counters) {
			noEcho(t, sent, d)
			within(t, d["IP.PacketsReceived"], sent, "all reached gVisor")
			require.Equal(t, int64(sent), d.sum("TCP.InvalidSegmentsReceived", "UDP.MalformedPacketsReceived"),
				"gVisor's transport parsers refused every one")
		}},
		{name: "ip-options", n: 300, gen: func(i int, r *rand.Rand) [][]byte {
			opts := [][]byte{
				{1, 1, 1, 0},                           // NOPs, EOL: valid
				{7, 7, 4, 0, 0, 0, 0, 0},               // record route with room: valid
				{7, 0, 0, 0},                           // length 0
				{7, 1, 0, 0},                           // length 1
				{7, 40, 4, 0},                          // length past the header
				{0x9e, 4, 0, 0},                        // unknown, copied
				{68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // timestamp
			}
			o := opts[i%len(opts)]
			h := ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: uint16(r.Uint32()), options: o}
			return [][]byte{h.bytes(udpDgram(k4, u4, uint16(20000+r.IntN(40000)), 9, []byte("options")))}
		}, check: func(t *testing.T, sent int, d counters) {
			require.Zero(t, d["svc.udp_echoed"])
			within(t, d["IP.PacketsReceived"], sent, "all reached gVisor")
			require.Equal(t, int64(sent), d["IP.MalformedPacketsReceived"]+d["svc.udp_discarded"],
				"each datagram was refused for its options or reached the discard service")
		}},
		{name: "overlapping-fragments", n: 200, gen: func(i int, r *rand.Rand) [][]byte {
			payload := make([]byte, 48)
			for j := range payload {
				payload[j] = byte(j)
			}
			if i%2 == 1 {
				// IPv6: RFC 5722 says drop the whole datagram.
				d := udpDgram(k6, u6, uint16(20000+r.IntN(40000)), 7, payload)
				id := r.Uint32()
				frag := func(off int, more bool, data []byte) []byte {
					h := make([]byte, 8)
					h[0] = unix.IPPROTO_UDP
					fo := uint16(off/8) << 3
					if more {
						fo |= 1
					}
					binary.BigEndian.PutUint16(h[2:], fo)
					binary.BigEndian.PutUint32(h[4:], id)
					return ip6(k6, u6, unix.IPPROTO_FRAGMENT, append(h, data...))
				}
				return [][]byte{frag(0, true, d[:32]), frag(16, false, d[16:])}
			}
			d := udpDgram(k4, u4, uint16(20000+r.IntN(40000)), 7, payload)
			id := uint16(r.Uint32())
			a := ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: id, mf: true}.bytes(d[:32])
			b := ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: id, fragOff: 16}.bytes(d[16:])
			return [][]byte{a, b}
		}, check: func(t *testing.T, sent int, d counters) {
			require.Zero(t, d["svc.udp_echoed"], "overlapping fragments are dropped, not reassembled")
			require.Equal(t, int64(sent/2), d["IP.MalformedFragmentsReceived"], "the overlapping half of each pair is refused")
		}},
		{name: "endless-fragments", n: 3000, gen: func(i int, r *rand.Rand) [][]byte {
			// First fragments that never get their rest, each a new
			// datagram: reassembly must time them out within its memory
			// limit.
			data := make([]byte, 1024)
			if i%2 == 1 {
				h := make([]byte, 8)
				h[0] = unix.IPPROTO_UDP
				binary.BigEndian.PutUint16(h[2:], 1) // offset 0, more
				binary.BigEndian.PutUint32(h[4:], uint32(i))
				return [][]byte{ip6(k6, u6, unix.IPPROTO_FRAGMENT, append(h, data...))}
			}
			return [][]byte{ip4{src: k4, dst: u4, proto: unix.IPPROTO_UDP, id: uint16(i), mf: true}.bytes(data)}
		}, check: func(t *testing.T, sent int, d counters) {
			require.Zero(t, d["svc.udp_echoed"])
			within(t, d["IP.PacketsReceived"], sent, "all reached reassembly")
		}},
		{name: "impossible-tcp-flags", n: 600, gen: func(i int, r *rand.Rand) [][]byte {
			flags := []byte{0x03, 0x06, 0x3f, 0x00, 0x01, 0x07, 0x29, 0xc2}[i%8] // SYN|FIN, SYN|RST, all, none, FIN, SYN|FIN|RST, FIN|PSH|URG, SYN|ECE|CWR
			dport := uint16(80)
			if i%3 == 0 {
				dport = 81 // closed
			}
			return [][]byte{ip4{src: k4, dst: u4, proto: unix.IPPROTO_TCP, id: uint16(r.Uint32())}.bytes(
				tcpSeg(k4, u4, uint16(20000+r.IntN(40000)), dport, r.Uint32(), r.Uint32(), flags, uint16(r.Uint32()), nil))}
		}, check: func(t *testing.T, sent int, d counters) {
			// SYN|ECE|CWR is a legitimate ECN-setup SYN: it may open a
			// half-open connection; nothing else may.
			require.LessOrEqual(t, d["TCP.PassiveConnectionOpenings"], int64(0), "no handshake completes from one segment")
		}},
		{name: "random-bytes", n: 1000, gen: func(i int, r *rand.Rand) [][]byte {
			p := make([]byte, 1+r.IntN(1400))
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			return [][]byte{p}
		}, check: func(t *testing.T, sent int, d counters) {
			noEcho(t, sent, d)
			// Nearly all fail the link's checks; the rare IPv6 packet
			// whose lengths happen to fit and whose next header is not
			// one the link checks goes on to gVisor, which counts it.
			within(t, d.sum(linkDrops...)+d["IP.PacketsReceived"], sent, "each dropped at the link or counted by gVisor")
		}},
	}
}

// TestMalformedInput sends every class of bad input at `ustack serve` over
// AF_PACKET and TUN, from below the kernel's stack. For each class the link
// accounts for every packet (delivered or counted as dropped), the
// counters say what the stack made of them, and nothing bad reaches a
// service. Then all classes again, in a loop, while a kernel client
// downloads over HTTP and exchanges UDP echoes: every byte arrives intact.
func TestMalformedInput(t *testing.T) {
	for _, kind := range []string{"veth", "tun"} {
		t.Run(kind, func(t *testing.T) {
			n := newSrvNet(t, kind, sched.BusyLock, link.Impairments{}, nil)
			snd := n.rawSender(t)
			classes := badClasses(srvKernel4.Addr(), srvUstack4.Addr(), srvKernel6.Addr(), srvUstack6.Addr())
			rx := func(c counters) int64 { return c["link.RXPackets"] + c.sum(linkDrops...) }
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap0 := ms.HeapInuse
			for ci, bc := range classes {
				r := rand.New(rand.NewPCG(uint64(ci), 1))
				before := snapshot(n)
				sent := 0
				for i := range bc.n {
					for _, p := range bc.gen(i, r) {
						require.NoError(t, snd.send(p))
						sent++
					}
					if sent%64 == 0 {
						// Pace to what ustack has taken: a TUN device's
						// queue drops silently when full.
						waitCounted(t, n, rx(before)+int64(sent)-64)
					}
				}
				waitCounted(t, n, rx(before)+int64(sent))
				time.Sleep(20 * time.Millisecond) // answers and timers settle
				d := snapshot(n).minus(before)
				t.Logf("%-22s sent %5d:%v", bc.name, sent, d)
				require.GreaterOrEqual(t, rx(d), int64(sent), "the link took or counted every packet")
				bc.check(t, sent, d)
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			t.Logf("heap in use: %d MiB before the bad input, %d MiB after", heap0>>20, ms.HeapInuse>>20)
			require.Less(t, ms.HeapInuse, heap0+64<<20, "bad input left bounded state behind")

			// All classes again, in a loop, while a legitimate client is
			// served.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var sendErr error
			attacks := newPacer(n, 0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(99, 2))
				for {
					for _, bc := range classes {
						for i := range bc.n / 4 {
							select {
							case <-stop:
								return
							default:
							}
							for _, p := range bc.gen(i, r) {
								if err := snd.send(p); err != nil {
									sendErr = err
									return
								}
								if attacks.sent.Add(1)%32 == 0 {
									attacks.wait(stop)
								}
							}
						}
					}
				}
			}()
			before := snapshot(n)
			start := time.Now()
			var fetched int64
			for attacks.sent.Load() < attackTotal && time.Since(start) < time.Minute {
				n.fetch(t, srvUstack4.Addr(), sized(8<<20))
				udpRoundTrips(t, n, 50)
				fetched += sized(8 << 20)
			}
			close(stop)
			wg.Wait()
			require.NoError(t, sendErr)
			d := snapshot(n).minus(before)
			t.Logf("served %d MiB and UDP echoes intact in %v while %d bad packets arrived:%v",
				fetched>>20, time.Since(start).Round(time.Millisecond), attacks.sent.Load(), d)
			require.GreaterOrEqual(t, attacks.sent.Load(), int64(attackTotal/2), "the attack ran alongside")
		})
	}
}

// attackTotal bad packets are sent, at least, while the client is served.
const attackTotal = 20000

// waitCounted waits until the link has taken or counted at least want
// packets in all.
func waitCounted(t *testing.T, n *srvNet, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := snapshotLink(n)
		if c >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link took or counted %d packets, want %d: packets were lost without a count", c, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func snapshotLink(n *srvNet) int64 {
	l := n.link.LinkStats()
	return int64(l.RXPackets + l.RXBadChecksum + l.RXMalformed + l.RXErrors + l.RXDetached)
}

// pacer keeps a sender of bad packets at most window packets ahead of
// what the served host's link has taken, so that it floods at the host's
// capacity, whatever that is (a race-instrumented build's is a tenth),
// without overflowing the kernel's queue in front of the link, where the
// legitimate client's packets would be dropped with the flood's.
type pacer struct {
	n     *srvNet
	base  int64
	start time.Time
	rate  float64 // packets per second at most; 0: only the window
	sent  atomic.Int64
}

const window = 64

func newPacer(n *srvNet, rate float64) *pacer {
	return &pacer{n: n, base: snapshotLink(n), start: time.Now(), rate: rate}
}

// wait blocks while the senders are a window ahead of the link or ahead of
// the rate, or until stop.
func (p *pacer) wait(stop <-chan struct{}) {
	for {
		sent := p.sent.Load()
		ahead := sent-(snapshotLink(p.n)-p.base) > window
		if p.rate > 0 && float64(sent) > p.rate*time.Since(p.start).Seconds() {
			ahead = true
		}
		if !ahead {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Microsecond):
		}
	}
}

// udpRoundTrips exchanges count datagrams with ustack's echo service from
// the kernel side.
func udpRoundTrips(t *testing.T, n *srvNet, count int) {
	t.Helper()
	var pc net.Conn
	require.NoError(t, n.k.Do(func() (err error) {
		pc, err = net.Dial("udp", netip.AddrPortFrom(srvUstack4.Addr(), 7).String())
		return err
	}))
	defer pc.Close()
	buf := make([]byte, 1500)
	for i := range count {
		msg := fmt.Appendf(nil, "legit %d", i)
		var got []byte
		for try := 0; got == nil; try++ {
			require.Less(t, try, 10, "round trip %d never came back", i)
			_, err := pc.Write(msg)
			require.NoError(t, err)
			require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
			for {
				k, err := pc.Read(buf)
				if err != nil {
					break // resend
				}
				if string(buf[:k]) == string(msg) {
					got = buf[:k]
					break
				}
				// A late answer to an earlier resend: skip it.
			}
		}
		require.Equal(t, string(msg), string(got))
	}
}

// TestBlindInjection sends segments for a live connection's four-tuple
// that its peer did not send, the way an off-path attacker would: data,
// RSTs, SYNs and zero-window ACKs with guessed sequence and acknowledgment
// numbers. None may reset, stall or corrupt the connection (RFC 5961):
// echoes through it continue intact while they arrive.
func TestBlindInjection(t *testing.T) {
	for _, kind := range []string{"veth", "tun"} {
		t.Run(kind, func(t *testing.T) {
			n := newSrvNet(t, kind, sched.None, link.Impairments{}, nil)
			snd := n.rawSender(t)
			var c net.Conn
			require.NoError(t, n.k.Do(func() (err error) {
				c, err = net.Dial("tcp", netip.AddrPortFrom(srvUstack4.Addr(), 7).String())
				return err
			}))
			defer c.Close()
			sport := uint16(c.LocalAddr().(*net.TCPAddr).Port)
			k4, u4 := srvKernel4.Addr(), srvUstack4.Addr()
			buf := make([]byte, 4096)
			// One echo first: the service has accepted the connection
			// before the counters are read.
			require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			_, err := c.Write([]byte("hello"))
			require.NoError(t, err)
			_, err = io.ReadFull(c, buf[:5])
			require.NoError(t, err)
			before := snapshot(n)
			r := rand.New(rand.NewPCG(7, 7))
			const rounds, perRound = 200, 20
			for i := range rounds {
				for j := range perRound {
					var flags byte
					var win uint16 = 65535
					var payload []byte
					switch j % 4 {
					case 0:
						flags, payload = 0x18, []byte("injected") // PSH|ACK with data
					case 1:
						flags = 0x04 // RST
					case 2:
						flags = 0x02 // SYN
					case 3:
						flags, win = 0x10, 0 // ACK closing the window
					}
					seg := tcpSeg(k4, u4, sport, 7, r.Uint32(), r.Uint32(), flags, win, payload)
					require.NoError(t, snd.send(ip4{src: k4, dst: u4, proto: unix.IPPROTO_TCP, id: uint16(r.Uint32())}.bytes(seg)))
				}
				msg := fmt.Appendf(nil, "round %d of the real conversation", i)
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				_, err := c.Write(msg)
				require.NoError(t, err, "round %d", i)
				got := buf[:0]
				for len(got) < len(msg) {
					k, err := c.Read(buf[len(got):cap(buf)])
					require.NoError(t, err, "round %d: the connection did not survive", i)
					got = buf[:len(got)+k]
				}
				require.Equal(t, string(msg), string(got), "round %d", i)
			}
			d := snapshot(n).minus(before)
			t.Logf("%d blind segments:%v", rounds*perRound, d)
			require.Zero(t, d["TCP.EstablishedResets"], "no blind RST reset the connection")
			require.Zero(t, d["svc.accepted"], "no blind SYN opened a connection")
		})
	}
}
