package linkutil

import (
	"fmt"
	"slices"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// ackLog is a dispatcher that logs each delivered TCP segment as
// "port:ack" for a pure ACK and "port:ack+len" for a data segment.
type ackLog struct{ got []string }

func (l *ackLog) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	buf := pkt.ToBuffer()
	b := buf.Flatten()
	buf.Release()
	var tcp header.TCP
	if proto == header.IPv6ProtocolNumber {
		tcp = header.TCP(header.IPv6(b).Payload())
	} else {
		tcp = header.TCP(header.IPv4(b).Payload())
	}
	s := fmt.Sprintf("%d:%d", tcp.SourcePort(), tcp.AckNumber())
	if n := len(tcp.Payload()); n > 0 {
		s += fmt.Sprintf("+%d", n)
	}
	l.got = append(l.got, s)
}

func (*ackLog) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// ackSeg describes one segment of an ACK-thinning round.
type ackSeg struct {
	port    uint16 // source port: the flow
	ack     uint32
	payload int
	flags   header.TCPFlags // 0: ACK
	opts    []byte          // TCP options, padded to 4 bytes
	v6      bool
}

func (s ackSeg) build() *stack.PacketBuffer {
	flags := s.flags
	if flags == 0 {
		flags = header.TCPFlagAck
	}
	tcpLen := header.TCPMinimumSize + len(s.opts)
	ipLen := header.IPv4MinimumSize
	if s.v6 {
		ipLen = header.IPv6MinimumSize
	}
	b := make([]byte, ipLen+tcpLen+s.payload)
	if s.v6 {
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(len(b) - ipLen), TransportProtocol: header.TCPProtocolNumber, HopLimit: 64,
			SrcAddr: tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 1}), DstAddr: tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 2})})
	} else {
		header.IPv4(b).Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: groSrc, DstAddr: groDst})
	}
	tcp := header.TCP(b[ipLen:])
	tcp.Encode(&header.TCPFields{SrcPort: s.port, DstPort: 80, SeqNum: 1, AckNum: s.ack, DataOffset: uint8(tcpLen), Flags: flags, WindowSize: 1000})
	copy(tcp[header.TCPMinimumSize:], s.opts)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if s.v6 {
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	}
	pkt.RXChecksumValidated = true
	return pkt
}

// TestGROThinsACKs: of a round's pure ACKs of one flow, those a later ACK
// of the flow acknowledges beyond are dropped and counted; anything else
// keeps its place in the flow's order, and nothing is held past Flush.
func TestGROThinsACKs(t *testing.T) {
	ts := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, header.TCPOptionTSLength, 0, 0, 0, 1, 0, 0, 0, 2}
	sack := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 0, 0, 0, 5, 0, 0, 0, 9}
	// A timestamp option whose length byte says 8: not what a later ACK
	// repeats, whatever it is (link.IsPureACK).
	badTS := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, 8, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, c := range []struct {
		name  string
		round []ackSeg
		want  []string
	}{
		{"a run of growing ACKs", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 200, opts: ts}, {port: 1, ack: 300}}, []string{"1:300"}},
		{"IPv6", []ackSeg{{port: 1, ack: 100, v6: true}, {port: 1, ack: 200, v6: true}}, []string{"1:200"}},
		{"duplicate ACKs", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 100}, {port: 1, ack: 100}}, []string{"1:100", "1:100", "1:100"}},
		{"an older ACK after a newer", []ackSeg{{port: 1, ack: 200}, {port: 1, ack: 100}}, []string{"1:200", "1:100"}},
		{"SACK blocks", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 200, opts: sack}, {port: 1, ack: 300, opts: sack}}, []string{"1:100", "1:200", "1:300"}},
		{"a malformed timestamp option", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 200, opts: badTS}, {port: 1, ack: 300, opts: ts}}, []string{"1:100", "1:200", "1:300"}},
		{"a malformed timestamp option, IPv6", []ackSeg{{port: 1, ack: 100, v6: true}, {port: 1, ack: 200, opts: badTS, v6: true}, {port: 1, ack: 300, v6: true}}, []string{"1:100", "1:200", "1:300"}},
		{"ECE", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 200, flags: header.TCPFlagAck | header.TCPFlagEce}, {port: 1, ack: 300}}, []string{"1:100", "1:200", "1:300"}},
		{"data between", []ackSeg{{port: 1, ack: 100}, {port: 1, ack: 200}, {port: 1, ack: 200, payload: 10, flags: header.TCPFlagAck | header.TCPFlagPsh}, {port: 1, ack: 300}, {port: 1, ack: 400}},
			[]string{"1:200", "1:200+10", "1:400"}},
		{"two flows", []ackSeg{{port: 1, ack: 100}, {port: 2, ack: 100}, {port: 1, ack: 200}, {port: 2, ack: 200}, {port: 2, ack: 300}}, []string{"1:200", "2:300"}},
		{"more flows than slots", func() (r []ackSeg) {
			for p := range groBucketSize + 2 {
				r = append(r, ackSeg{port: uint16(p + 1), ack: 100}, ackSeg{port: uint16(p + 1), ack: 200})
			}
			return r
		}(), func() (w []string) {
			for p := range groBucketSize + 2 {
				w = append(w, fmt.Sprintf("%d:200", p+1))
			}
			return w
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The third pass is GRO on, then turned off by SetCoalescing
			// (a forwarding stack's NIC): it must deliver as off does.
			for pass, on := range []bool{true, false, true} {
				var g GRO
				g.Init(on)
				if pass == 2 {
					g.SetCoalescing(false)
					on = false
				}
				l := &ackLog{}
				g.Begin(l)
				for _, s := range c.round {
					pkt := s.build()
					g.Enqueue(pkt)
					pkt.DecRef()
				}
				g.Flush()
				if n := heldBy(t, &g); n > 0 {
					t.Fatalf("GRO on %v: %d packets still held after Flush", on, n)
				}
				want := c.want
				if !on {
					want = nil
					for _, s := range c.round {
						w := fmt.Sprintf("%d:%d", s.port, s.ack)
						if s.payload > 0 {
							w += fmt.Sprintf("+%d", s.payload)
						}
						want = append(want, w)
					}
				}
				// Flows may interleave differently; within a flow the
				// order is kept.
				for _, port := range []string{"1:", "2:", "3:", "4:", "5:", "6:", "7:", "8:", "9:", "10:"} {
					of := func(s []string) []string {
						return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return len(x) < len(port) || x[:len(port)] != port })
					}
					if g, w := of(l.got), of(want); !slices.Equal(g, w) {
						t.Fatalf("GRO on %v: flow %s delivered %v, want %v (all: %v)", on, port, g, w, l.got)
					}
				}
				if len(l.got) != len(want) {
					t.Fatalf("GRO on %v: delivered %v, want %v", on, l.got, want)
				}
				// Every segment went up or was counted as thinned.
				if got, want := g.ThinnedACKs(), uint64(len(c.round)-len(want)); got != want {
					t.Fatalf("GRO on %v: %d ACKs counted as thinned, want %d", on, got, want)
				}
			}
		})
	}
}

// BenchmarkGROACKRound measures a receive round of four pure ACKs of one
// flow (a bulk sender's typical round), three of which are thinned.
func BenchmarkGROACKRound(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("gro=%v", on), func(b *testing.B) {
			var g GRO
			g.Init(on)
			d := &countDispatcher{}
			b.ReportAllocs()
			for i := range b.N {
				g.Begin(d)
				for j := range 4 {
					pkt := ackSeg{port: 1, ack: uint32(i*4 + j)}.build()
					g.Enqueue(pkt)
					pkt.DecRef()
				}
				g.Flush()
			}
		})
	}
}
