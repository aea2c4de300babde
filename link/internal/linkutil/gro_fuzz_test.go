package linkutil

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// groBase is the first sequence number of every fuzzed flow.
const groBase = 1 << 31

// groStream is the byte stream the fuzzed segments carry pieces of (each
// flow its own copy of it).
var groStream = func() []byte {
	b := make([]byte, 8192)
	xfer.Pattern(7, int64(len(b))).Read(b)
	return b
}()

var (
	groSrc  = tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	groDst  = tcpip.AddrFrom4([4]byte{198, 18, 0, 2})
	groSrc6 = tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 1})
	groDst6 = tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 2})
)

// groFlow is one direction of a TCP flow of the GRO tests, told apart by
// IP version and source port.
type groFlow struct {
	v6    bool
	sport uint16
}

func (f groFlow) String() string {
	if f.v6 {
		return fmt.Sprintf("IPv6:%d", f.sport)
	}
	return fmt.Sprintf("IPv4:%d", f.sport)
}

// groFlows are the flows of the GRO tests. gVisor's GRO puts a flow in
// the bucket of the sum of its address bytes and ports, modulo 8, and its
// Flush empties each bucket of only its oldest packet: the first two
// flows, ports 8 apart, share a bucket, so a Flush that empties each
// bucket once leaves the second held. The third is in a bucket of its
// own. The fourth is IPv6, which GRO passes up at once, but whose pure
// ACKs it holds and thins as IPv4's.
var groFlows = [...]groFlow{{sport: 40000}, {sport: 40008}, {sport: 40001}, {v6: true, sport: 40000}}

// tcpSegment builds a TCP segment of flow f with seq and payload and
// right checksums.
func tcpSegment(f groFlow, seq uint32, flags header.TCPFlags, payload []byte) []byte {
	ipLen := header.IPv4MinimumSize
	if f.v6 {
		ipLen = header.IPv6MinimumSize
	}
	b := make([]byte, ipLen+header.TCPMinimumSize+len(payload))
	if f.v6 {
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength:     uint16(len(b) - ipLen),
			TransportProtocol: header.TCPProtocolNumber,
			HopLimit:          64,
			SrcAddr:           groSrc6,
			DstAddr:           groDst6,
		})
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(b)),
			TTL:         64,
			Protocol:    uint8(header.TCPProtocolNumber),
			SrcAddr:     groSrc,
			DstAddr:     groDst,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	tcp := header.TCP(b[ipLen:])
	tcp.Encode(&header.TCPFields{
		SrcPort: f.sport, DstPort: 5001, SeqNum: seq, AckNum: 1,
		DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 65535,
	})
	copy(tcp.Payload(), payload)
	resum(b)
	return b
}

// parseSegment splits an IPv4 or IPv6 TCP segment built by tcpSegment
// (or merged from such) into its flow, addresses and TCP part.
func parseSegment(b []byte) (f groFlow, src, dst tcpip.Address, tcp header.TCP, ok bool) {
	switch header.IPVersion(b) {
	case header.IPv4Version:
		ip := header.IPv4(b)
		if !ip.IsValid(len(b)) || int(ip.TotalLength()) != len(b) {
			return f, src, dst, nil, false
		}
		tcp = header.TCP(ip.Payload())
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6Version:
		ip := header.IPv6(b)
		if !ip.IsValid(len(b)) || header.IPv6MinimumSize+int(ip.PayloadLength()) != len(b) {
			return f, src, dst, nil, false
		}
		tcp = header.TCP(ip.Payload())
		src, dst, f.v6 = ip.SourceAddress(), ip.DestinationAddress(), true
	default:
		return f, src, dst, nil, false
	}
	if len(tcp) < header.TCPMinimumSize {
		return f, src, dst, nil, false
	}
	f.sport = tcp.SourcePort()
	return f, src, dst, tcp, true
}

// resum recomputes the TCP checksum of a segment after an edit.
func resum(seg []byte) {
	_, src, dst, tcp, _ := parseSegment(seg)
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
}

// run is a stretch of consecutive stream bytes, [start, end) in sequence
// space, delivered one after the other.
type run struct{ start, end uint32 }

// recorder is a dispatcher that records what a TCP receiver would learn
// from the packets delivered to it: which stream bytes of each flow
// arrived, in the order they arrived (checking each against the stream),
// and where SYN, RST and FIN were. Fed the segments of a round as they
// came (record), it is what the round must deliver: GRO merges only
// segments that continue each other, so each flow's bytes reach TCP in
// the order they came, whatever it merged.
type recorder struct {
	t       testing.TB
	packets int
	runs    map[groFlow][]run
	marks   map[string]bool
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, runs: map[groFlow][]run{}, marks: map[string]bool{}}
}

func (r *recorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	buf := pkt.ToBuffer()
	b := buf.Flatten()
	buf.Release()
	r.record(b)
}

func (*recorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// record notes one segment as delivered.
func (r *recorder) record(b []byte) {
	r.packets++
	f, _, _, tcp, ok := parseSegment(b)
	if !ok {
		r.t.Fatalf("delivered a packet whose IP header does not match its %d bytes", len(b))
	}
	seq, flags, payload := tcp.SequenceNumber(), tcp.Flags(), tcp.Payload()
	for i, c := range payload {
		at := seq + uint32(i)
		if want := groStream[at-groBase]; c != want {
			r.t.Fatalf("flow %v: byte at sequence %d is %#x, the stream has %#x", f, at, c, want)
		}
	}
	end := seq + uint32(len(payload))
	if runs := r.runs[f]; len(payload) > 0 {
		if n := len(runs); n > 0 && runs[n-1].end == seq {
			runs[n-1].end = end
		} else {
			r.runs[f] = append(runs, run{seq, end})
		}
	}
	for _, m := range []struct {
		flag header.TCPFlags
		name string
		at   uint32
	}{{header.TCPFlagSyn, "syn", seq}, {header.TCPFlagRst, "rst", seq}, {header.TCPFlagFin, "fin", end}} {
		if flags&m.flag != 0 {
			r.marks[fmt.Sprintf("%v %s@%d/ack%d", f, m.name, m.at, tcp.AckNumber())] = true
		}
	}
}

// groSegments turns fuzz input into rounds of segments, four bytes a
// segment: its flow and where in the stream it starts (two bytes: the
// start modulo 6000, the flow of groFlows by the rest), how long it is,
// and its flags (PSH, FIN, RST, SYN, URG, CWR, a round ending after it,
// and a different ACK number). Reordered, overlapping and duplicate
// segments, pure ACKs (no payload, no flag) and the flows of one round
// sharing gVisor's GRO buckets all come out of it.
func groSegments(data []byte) [][][]byte {
	var (
		rounds [][][]byte
		cur    [][]byte
		n      int
	)
	for ; len(data) >= 4 && n < 128; data = data[4:] {
		v := int(binary.BigEndian.Uint16(data))
		start, flow := v%6000, groFlows[v/6000%len(groFlows)]
		size := int(data[2]) * 6 % 1401
		f := data[3]
		flags := header.TCPFlagAck
		for bit, flag := range []header.TCPFlags{header.TCPFlagPsh, header.TCPFlagFin, header.TCPFlagRst, header.TCPFlagSyn, header.TCPFlagUrg, header.TCPFlagCwr} {
			if f&(1<<bit) != 0 {
				flags |= flag
			}
		}
		seg := tcpSegment(flow, uint32(groBase+start), flags, groStream[start:start+size])
		if f&0x80 != 0 {
			_, _, _, tcp, _ := parseSegment(seg)
			tcp.SetAckNumber(2)
			resum(seg)
		}
		cur = append(cur, seg)
		n++
		if f&0x40 != 0 {
			rounds = append(rounds, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		rounds = append(rounds, cur)
	}
	return rounds
}

// groSeed encodes segments as groSegments reads them: flow is an index
// into groFlows, start the stream offset (below 6000), size the payload
// in units of 6 bytes (230: 1380 bytes), f the flag byte.
type groSeed struct {
	flow, start int
	size, f     byte
}

func groInput(segs ...groSeed) []byte {
	var b []byte
	for _, s := range segs {
		b = binary.BigEndian.AppendUint16(b, uint16(s.flow*6000+s.start))
		b = append(b, s.size, s.f)
	}
	return b
}

// deliverRound runs one receive round of segs through g into d.
func deliverRound(g *GRO, d stack.NetworkDispatcher, segs [][]byte) {
	g.Begin(d)
	for _, s := range segs {
		enqueue(g, s)
	}
	g.Flush()
}

// enqueue hands g the IPv4 or IPv6 segment s, as a receive round does.
func enqueue(g *GRO, s []byte) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(s)})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if header.IPVersion(s) == header.IPv6Version {
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	}
	pkt.RXChecksumValidated = true
	g.Enqueue(pkt)
	pkt.DecRef()
}

// heldBy returns how many packets g holds: pure ACKs waiting for the
// round's end, and packets in gVisor's GRO buckets, read from its
// String, the only view it gives of them ("bucket 3: 2 packets: ...").
// It fails t if that view cannot be read.
func heldBy(t testing.TB, g *GRO) int {
	t.Helper()
	n, buckets := g.nacks, 0
	for _, line := range strings.Split(g.g.String(), "\n") {
		var b, c int
		if _, err := fmt.Sscanf(line, "bucket %d: %d packets", &b, &c); err == nil {
			n += c
			buckets++
		}
	}
	if buckets == 0 {
		t.Fatalf("gVisor's GRO state lists no bucket: %q", g.g.String())
	}
	return n
}

// checkRound fails t unless g holds nothing after the round's Flush and
// got has learnt, of every flow, what want has.
func checkRound(t testing.TB, round int, g *GRO, got, want *recorder) {
	t.Helper()
	if n := heldBy(t, g); n > 0 {
		t.Fatalf("after round %d's Flush, GRO (on %v) still holds %d packets", round, g.on, n)
	}
	for _, f := range groFlows {
		if !slices.Equal(got.runs[f], want.runs[f]) {
			t.Fatalf("after round %d, GRO (on %v): flow %v delivered the stream bytes %v, in that order; it was sent %v", round, g.on, f, got.runs[f], want.runs[f])
		}
	}
	if !maps.Equal(got.marks, want.marks) {
		t.Fatalf("after round %d, GRO (on %v): delivered flags %v, sent %v", round, g.on, got.marks, want.marks)
	}
	if got.packets > want.packets {
		t.Fatalf("after round %d, GRO (on %v): delivered %d packets, more than the %d sent", round, g.on, got.packets, want.packets)
	}
}

// FuzzGRO runs rounds of fuzzed segments of several flows through a GRO
// that coalesces and one that does not, and checks after every round's
// Flush that neither holds a packet and that the receiver has learnt from
// each what the segments as sent tell: every flow's stream bytes (each
// equal to the stream) in the order they were sent, the same SYN, RST and
// FIN positions, in no more packets.
func FuzzGRO(f *testing.F) {
	full := byte(230) // 1380 bytes
	// In order, full-sized: merges to one packet.
	f.Add(groInput(groSeed{0, 0, full, 0}, groSeed{0, 1380, full, 0}, groSeed{0, 2760, full, 0}))
	// The same, split over two rounds.
	f.Add(groInput(groSeed{0, 0, full, 0}, groSeed{0, 1380, full, 0x40}, groSeed{0, 2760, full, 0}))
	// Reordered, duplicated, overlapping.
	f.Add(groInput(groSeed{0, 1380, full, 0}, groSeed{0, 0, full, 0}, groSeed{0, 0, full, 0}, groSeed{0, 512, full, 0}))
	// Flags in the middle: PSH, FIN, RST, SYN, a changed ACK.
	f.Add(groInput(groSeed{0, 0, full, 1}, groSeed{0, 1380, full, 2}, groSeed{0, 2760, full, 4}, groSeed{0, 4140, full, 8}, groSeed{0, 5520, full, 0x80}))
	// Empty segments and a short one between full ones.
	f.Add(groInput(groSeed{0, 0, 0, 0}, groSeed{0, 0, full, 0}, groSeed{0, 1380, 10, 0}, groSeed{0, 1440, full, 0}))
	// Every flow in one round, interleaved: the two that share a bucket
	// are both held until Flush.
	f.Add(groInput(groSeed{0, 0, full, 0}, groSeed{1, 0, full, 0}, groSeed{2, 0, full, 0}, groSeed{3, 0, full, 0},
		groSeed{0, 1380, full, 0}, groSeed{1, 1380, full, 0}, groSeed{2, 1380, full, 0}, groSeed{3, 1380, full, 0}))
	// Pure ACKs of every flow, the later ones acknowledging more, between
	// data of the bucket-sharing flows; then a round of the same.
	f.Add(groInput(groSeed{2, 0, 0, 0}, groSeed{3, 0, 0, 0}, groSeed{0, 0, full, 0}, groSeed{1, 0, full, 0},
		groSeed{2, 0, 0, 0x80}, groSeed{3, 0, 0, 0x80}, groSeed{0, 0, 0, 0}, groSeed{1, 0, 0, 0x40},
		groSeed{1, 1380, full, 0}, groSeed{0, 1380, full, 0}, groSeed{2, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var on, off GRO
		on.Init(true)
		off.Init(false)
		ron, roff, sent := newRecorder(t), newRecorder(t), newRecorder(t)
		for i, segs := range groSegments(data) {
			for _, s := range segs {
				sent.record(s)
			}
			deliverRound(&on, ron, segs)
			deliverRound(&off, roff, segs)
			checkRound(t, i, &on, ron, sent)
			checkRound(t, i, &off, roff, sent)
			if roff.packets != sent.packets {
				t.Fatalf("after round %d: GRO off delivered %d packets of the %d sent", i, roff.packets, sent.packets)
			}
		}
	})
}

// groMixedRound is one receive round of every flow of groFlows: three
// in-order full segments each, interleaved, then two growing pure ACKs
// of the third flow and of the IPv6 flow, interleaved too.
func groMixedRound() [][]byte {
	var segs []groSeed
	for i := range 3 {
		for fl := range groFlows {
			segs = append(segs, groSeed{fl, i * 1380, 230, 0})
		}
	}
	segs = append(segs, groSeed{2, 0, 0, 0}, groSeed{3, 0, 0, 0}, groSeed{2, 0, 0, 0x80}, groSeed{3, 0, 0, 0x80})
	return groSegments(groInput(segs...))[0]
}

// TestGROMerges checks what FuzzGRO relies on, in one round of every
// flow (groMixedRound): before Flush, GRO holds packets of several flows,
// two of them in one gVisor bucket; after it, nothing; in-order full
// segments of an IPv4 flow merge into one packet within a round, and
// not across rounds; IPv6 passes up as it came; and every flow's bytes
// arrive in the order they were sent. So FuzzGRO compares merged
// deliveries, not the same packets twice, and a Flush that leaves a
// packet held fails it.
func TestGROMerges(t *testing.T) {
	round := groMixedRound()
	for _, c := range []struct {
		name   string
		rounds [][][]byte
		// packets is what arrives: per IPv4 flow one packet a round,
		// per IPv6 segment one, and of each flow's two pure ACKs the
		// later.
		packets int
	}{
		{"one round", [][][]byte{round}, 3 + 3 + 2},
		{"two rounds", [][][]byte{round[:7], round[7:]}, 6 + 3 + 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g GRO
			g.Init(true)
			got, sent := newRecorder(t), newRecorder(t)
			for i, segs := range c.rounds {
				g.Begin(got)
				for _, s := range segs {
					sent.record(s)
					enqueue(&g, s)
				}
				require.GreaterOrEqual(t, heldBy(t, &g), 3, "round %d: before Flush, the three IPv4 flows are held", i)
				g.Flush()
				checkRound(t, i, &g, got, sent)
			}
			for _, f := range groFlows {
				require.Equal(t, []run{{groBase, groBase + 3*1380}}, got.runs[f], "flow %v", f)
			}
			require.Equal(t, c.packets, got.packets)
		})
	}
}

// TestGROSetCoalescing: turned off, a round hands each segment up as it
// came; turned back on, the next round merges again.
func TestGROSetCoalescing(t *testing.T) {
	var g GRO
	g.Init(true)
	round := groMixedRound()
	for _, c := range []struct {
		on      bool
		packets int
	}{{true, 8}, {false, len(round)}, {true, 8}} {
		g.SetCoalescing(c.on)
		got, sent := newRecorder(t), newRecorder(t)
		for _, s := range round {
			sent.record(s)
		}
		deliverRound(&g, got, round)
		checkRound(t, 0, &g, got, sent)
		require.Equal(t, c.packets, got.packets, "coalescing %v", c.on)
	}
}

// TestGROIPv6PassesThrough: IPv6 segments go up at once, one by one, and
// leave no buffer referenced (TestMain's leak check fails otherwise, as
// it does when they go through gVisor's GRO).
func TestGROIPv6PassesThrough(t *testing.T) {
	var g GRO
	g.Init(true)
	d := &countDispatcher{}
	g.Begin(d)
	for i := range 3 {
		enqueue(&g, tcpSegment(groFlows[3], uint32(groBase+i*100), header.TCPFlagAck, groStream[i*100:(i+1)*100]))
		require.Equal(t, i+1, d.n, "IPv6 segments delivered at once")
	}
	g.Flush()
}

// BenchmarkGRO measures a round of 64 full-sized in-order segments of one
// flow through GRO, on (coalesced into 64 KiB packets) and off (each
// delivered alone), to a dispatcher that only drops them.
func BenchmarkGRO(b *testing.B) {
	segs := make([][]byte, 64)
	for i := range segs {
		segs[i] = tcpSegment(groFlows[0], uint32(groBase+i*1448), header.TCPFlagAck, make([]byte, 1448))
	}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("on=%v", on), func(b *testing.B) {
			var g GRO
			g.Init(on)
			d := &countDispatcher{}
			b.ReportAllocs()
			b.SetBytes(int64(len(segs) * len(segs[0])))
			for b.Loop() {
				deliverRound(&g, d, segs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(segs)), "ns/pkt")
			b.ReportMetric(float64(d.n)/float64(b.N), "delivered/round")
		})
	}
}

// countDispatcher counts deliveries and drops them.
type countDispatcher struct{ n int }

func (c *countDispatcher) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	c.n++
}

func (*countDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}
