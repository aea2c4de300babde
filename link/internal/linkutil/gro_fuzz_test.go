package linkutil

import (
	"encoding/binary"
	"fmt"
	"maps"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// groBase is the first sequence number of the fuzzed flow.
const groBase = 1 << 31

// groStream is the byte stream the fuzzed segments carry pieces of.
var groStream = func() []byte {
	b := make([]byte, 8192)
	xfer.Pattern(7, int64(len(b))).Read(b)
	return b
}()

var (
	groSrc = tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	groDst = tcpip.AddrFrom4([4]byte{198, 18, 0, 2})
)

// recorder is a dispatcher that records what a TCP receiver would learn
// from the packets delivered to it: which stream bytes arrived (checking
// each against the stream), and where SYN, RST and FIN were.
type recorder struct {
	t       testing.TB
	packets int
	bytes   map[uint32]bool
	marks   map[string]bool
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, bytes: map[uint32]bool{}, marks: map[string]bool{}}
}

func (r *recorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	r.packets++
	buf := pkt.ToBuffer()
	b := buf.Flatten()
	buf.Release()
	ip := header.IPv4(b)
	if !ip.IsValid(len(b)) || int(ip.TotalLength()) != len(b) {
		r.t.Fatalf("delivered a packet whose IPv4 header does not match its %d bytes", len(b))
	}
	tcp := header.TCP(ip.Payload())
	seq, flags, payload := tcp.SequenceNumber(), tcp.Flags(), tcp.Payload()
	for i, c := range payload {
		at := seq + uint32(i)
		if want := groStream[at-groBase]; c != want {
			r.t.Fatalf("byte at sequence %d is %#x, the stream has %#x", at, c, want)
		}
		r.bytes[at] = true
	}
	end := seq + uint32(len(payload))
	for _, m := range []struct {
		flag header.TCPFlags
		name string
		at   uint32
	}{{header.TCPFlagSyn, "syn", seq}, {header.TCPFlagRst, "rst", seq}, {header.TCPFlagFin, "fin", end}} {
		if flags&m.flag != 0 {
			r.marks[fmt.Sprintf("%s@%d/ack%d", m.name, m.at, tcp.AckNumber())] = true
		}
	}
}

func (*recorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// tcpSegment builds an IPv4 TCP segment of one flow with seq and payload
// and right checksums.
func tcpSegment(seq uint32, flags header.TCPFlags, payload []byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)),
		TTL:         64,
		Protocol:    uint8(header.TCPProtocolNumber),
		SrcAddr:     groSrc,
		DstAddr:     groDst,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(b[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{
		SrcPort: 40000, DstPort: 5001, SeqNum: seq, AckNum: 1,
		DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 65535,
	})
	copy(tcp.Payload(), payload)
	resum(b)
	return b
}

// resum recomputes the TCP checksum of an IPv4 segment after an edit.
func resum(seg []byte) {
	ip := header.IPv4(seg)
	tcp := header.TCP(ip.Payload())
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
}

// groSegments turns fuzz input into rounds of segments of one flow, four
// bytes a segment: where in the stream it starts (two bytes), how long it
// is, and its flags (PSH, FIN, RST, SYN, URG, CWR, a round ending after
// it, and a different ACK number). Reordered, overlapping and duplicate
// segments all come out of it.
func groSegments(data []byte) [][][]byte {
	var (
		rounds [][][]byte
		cur    [][]byte
		n      int
	)
	for ; len(data) >= 4 && n < 128; data = data[4:] {
		start := int(binary.BigEndian.Uint16(data)) % 6000
		size := int(data[2]) * 6 % 1401
		f := data[3]
		flags := header.TCPFlagAck
		for bit, flag := range []header.TCPFlags{header.TCPFlagPsh, header.TCPFlagFin, header.TCPFlagRst, header.TCPFlagSyn, header.TCPFlagUrg, header.TCPFlagCwr} {
			if f&(1<<bit) != 0 {
				flags |= flag
			}
		}
		seg := tcpSegment(uint32(groBase+start), flags, groStream[start:start+size])
		if f&0x80 != 0 {
			header.TCP(seg[header.IPv4MinimumSize:]).SetAckNumber(2)
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

// deliverRound runs one receive round of segs through g into d.
func deliverRound(g *GRO, d stack.NetworkDispatcher, segs [][]byte) {
	g.Begin(d)
	for _, s := range segs {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(s)})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		pkt.RXChecksumValidated = true
		g.Enqueue(pkt)
		pkt.DecRef()
	}
	g.Flush()
}

// FuzzGRO runs rounds of fuzzed segments of a flow through a GRO that
// coalesces and one that does not, and checks after every round that the
// receiver has learnt the same from both: the same stream bytes (each
// equal to the stream), the same SYN, RST and FIN positions, in no more
// packets. Checking after every round also checks that nothing is held
// past a round's Flush.
func FuzzGRO(f *testing.F) {
	seed := func(segs ...[4]byte) []byte {
		var b []byte
		for _, s := range segs {
			b = append(b, s[:]...)
		}
		return b
	}
	// In order, full-sized: merges to one packet.
	f.Add(seed([4]byte{0, 0, 230, 0}, [4]byte{0x05, 0x64, 230, 0}, [4]byte{0x0a, 0xc8, 230, 0}))
	// The same, split over two rounds.
	f.Add(seed([4]byte{0, 0, 230, 0}, [4]byte{0x05, 0x64, 230, 0x40}, [4]byte{0x0a, 0xc8, 230, 0}))
	// Reordered, duplicated, overlapping.
	f.Add(seed([4]byte{0x05, 0x64, 230, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0x02, 0x00, 230, 0}))
	// Flags in the middle: PSH, FIN, RST, SYN, a changed ACK.
	f.Add(seed([4]byte{0, 0, 230, 1}, [4]byte{0x05, 0x64, 230, 2}, [4]byte{0x0a, 0xc8, 230, 4}, [4]byte{0x10, 0x2c, 230, 8}, [4]byte{0x15, 0x90, 230, 0x80}))
	// Empty segments and a short one between full ones.
	f.Add(seed([4]byte{0, 0, 0, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0x05, 0x64, 10, 0}, [4]byte{0x05, 0xa0, 230, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var on, off GRO
		on.Init(true)
		off.Init(false)
		ron, roff := newRecorder(t), newRecorder(t)
		for i, segs := range groSegments(data) {
			deliverRound(&on, ron, segs)
			deliverRound(&off, roff, segs)
			if !maps.Equal(ron.bytes, roff.bytes) {
				t.Fatalf("after round %d: GRO on delivered %d stream bytes, off %d", i, len(ron.bytes), len(roff.bytes))
			}
			if !maps.Equal(ron.marks, roff.marks) {
				t.Fatalf("after round %d: GRO on delivered flags %v, off %v", i, ron.marks, roff.marks)
			}
			if ron.packets > roff.packets {
				t.Fatalf("after round %d: GRO on delivered %d packets, more than the %d without it", i, ron.packets, roff.packets)
			}
		}
	})
}

// TestGROMerges checks that the fuzz target's premise holds: in-order
// full segments of one flow do merge within a round, and not across
// rounds, so FuzzGRO compares merged deliveries, not the same packets
// twice.
func TestGROMerges(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      []byte
		packets int
	}{
		{"one round", []byte{0, 0, 230, 0, 0x05, 0x64, 230, 0, 0x0a, 0xc8, 230, 0}, 1},
		{"two rounds", []byte{0, 0, 230, 0, 0x05, 0x64, 230, 0x40, 0x0a, 0xc8, 230, 0}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g GRO
			g.Init(true)
			r := newRecorder(t)
			for _, segs := range groSegments(c.in) {
				deliverRound(&g, r, segs)
			}
			if r.packets != c.packets || len(r.bytes) != 3*1380 {
				t.Fatalf("3 in-order segments of 1380 bytes: delivered %d packets with %d bytes, want %d with %d", r.packets, len(r.bytes), c.packets, 3*1380)
			}
		})
	}
}

// TestGROSetCoalescing: turned off, a round hands each segment up as it
// came; turned back on, the next round merges again.
func TestGROSetCoalescing(t *testing.T) {
	var g GRO
	g.Init(true)
	round := groSegments([]byte{0, 0, 230, 0, 0x05, 0x64, 230, 0, 0x0a, 0xc8, 230, 0})[0]
	for _, c := range []struct {
		on      bool
		packets int
	}{{true, 1}, {false, 3}, {true, 1}} {
		g.SetCoalescing(c.on)
		r := newRecorder(t)
		deliverRound(&g, r, round)
		if r.packets != c.packets || len(r.bytes) != 3*1380 {
			t.Fatalf("coalescing %v: 3 in-order segments of 1380 bytes went up as %d packets with %d bytes, want %d with %d", c.on, r.packets, len(r.bytes), c.packets, 3*1380)
		}
	}
}

// TestGROIPv6PassesThrough: IPv6 segments go up at once, one by one, and
// leave no buffer referenced (TestMain's leak check fails otherwise, as
// it does when they go through gVisor's GRO).
func TestGROIPv6PassesThrough(t *testing.T) {
	src := tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 1})
	dst := tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 2})
	var g GRO
	g.Init(true)
	d := &countDispatcher{}
	g.Begin(d)
	for i := range 3 {
		b := make([]byte, header.IPv6MinimumSize+header.TCPMinimumSize+100)
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(len(b) - header.IPv6MinimumSize), TransportProtocol: header.TCPProtocolNumber, HopLimit: 64, SrcAddr: src, DstAddr: dst})
		header.TCP(b[header.IPv6MinimumSize:]).Encode(&header.TCPFields{SrcPort: 1, DstPort: 2, SeqNum: uint32(i * 100), DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck})
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
		pkt.RXChecksumValidated = true
		g.Enqueue(pkt)
		pkt.DecRef()
		if d.n != i+1 {
			t.Fatalf("after %d IPv6 segments, %d delivered", i+1, d.n)
		}
	}
	g.Flush()
}

// BenchmarkGRO measures a round of 64 full-sized in-order segments of one
// flow through GRO, on (coalesced into 64 KiB packets) and off (each
// delivered alone), to a dispatcher that only drops them.
func BenchmarkGRO(b *testing.B) {
	segs := make([][]byte, 64)
	for i := range segs {
		segs[i] = tcpSegment(uint32(groBase+i*1448), header.TCPFlagAck, make([]byte, 1448))
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
