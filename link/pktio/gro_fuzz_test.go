package pktio_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/pktio"
)

// groBase is the first sequence number of the fuzzed flow.
const groBase = 1 << 31

// groStream is the byte stream the fuzzed segments carry pieces of.
var groStream = func() []byte {
	b := make([]byte, 8192)
	xfer.Pattern(7, int64(len(b))).Read(b)
	return b
}()

// recorder is a dispatcher that records what a TCP receiver would learn
// from the packets delivered to it: which stream bytes arrived (checking
// each against the stream), and where SYN, RST and FIN were.
type recorder struct {
	t       *testing.T
	packets int
	bytes   map[uint32]bool
	marks   map[string]bool
}

func newRecorder(t *testing.T) *recorder {
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

// groSegments turns fuzz input into segments of one flow, four bytes
// each: where in the stream the segment starts (two bytes), how long it
// is, and its flags (PSH, FIN, RST, SYN, URG, CWR, and a different ACK
// number). Reordered, overlapping and duplicate segments all come out of
// it.
func groSegments(data []byte) [][]byte {
	var segs [][]byte
	for ; len(data) >= 4 && len(segs) < 128; data = data[4:] {
		start := int(binary.BigEndian.Uint16(data)) % 6000
		n := int(data[2]) * 6 % 1401
		f := data[3]
		flags := header.TCPFlagAck
		for bit, flag := range []header.TCPFlags{header.TCPFlagPsh, header.TCPFlagFin, header.TCPFlagRst, header.TCPFlagSyn, header.TCPFlagUrg, header.TCPFlagCwr} {
			if f&(1<<bit) != 0 {
				flags |= flag
			}
		}
		seg := tcpSegment(uint32(groBase+start), flags, groStream[start:start+n])
		if f&0x80 != 0 {
			tcp := header.TCP(seg[header.IPv4MinimumSize:])
			tcp.SetAckNumber(2)
			resum(seg)
		}
		segs = append(segs, seg)
	}
	return segs
}

// resum recomputes the TCP checksum of an IPv4 segment after an edit.
func resum(seg []byte) {
	ip := header.IPv4(seg)
	tcp := header.TCP(ip.Payload())
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
}

// FuzzGRO writes one batch of fuzzed segments of a flow to an endpoint
// with GRO and to one without, and checks that the receiver learns the
// same from both: the same stream bytes (each equal to the stream), the
// same SYN, RST and FIN positions, in no more packets.
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
	// Reordered, duplicated, overlapping.
	f.Add(seed([4]byte{0x05, 0x64, 230, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0x02, 0x00, 230, 0}))
	// Flags in the middle: PSH, FIN, RST, SYN, a changed ACK.
	f.Add(seed([4]byte{0, 0, 230, 1}, [4]byte{0x05, 0x64, 230, 2}, [4]byte{0x0a, 0xc8, 230, 4}, [4]byte{0x10, 0x2c, 230, 8}, [4]byte{0x15, 0x90, 230, 0x80}))
	// Empty segments and a short one between full ones.
	f.Add(seed([4]byte{0, 0, 0, 0}, [4]byte{0, 0, 230, 0}, [4]byte{0x05, 0x64, 10, 0}, [4]byte{0x05, 0xa0, 230, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		segs := groSegments(data)
		if len(segs) == 0 {
			return
		}
		on, off := newRecorder(t), newRecorder(t)
		for _, c := range []struct {
			r    *recorder
			nogr bool
		}{{on, false}, {off, true}} {
			ep, err := pktio.New(&pktio.Options{NoGRO: c.nogr})
			if err != nil {
				t.Fatal(err)
			}
			ep.Attach(c.r)
			if _, err := ep.Write(segs, 0); err != nil {
				t.Fatal(err)
			}
			ep.Close()
		}
		if !maps.Equal(on.bytes, off.bytes) {
			t.Fatalf("GRO on delivered %d stream bytes, off %d", len(on.bytes), len(off.bytes))
		}
		if !maps.Equal(on.marks, off.marks) {
			t.Fatalf("GRO on delivered flags %v, off %v", on.marks, off.marks)
		}
		if on.packets > off.packets {
			t.Fatalf("GRO on delivered %d packets, more than the %d without it", on.packets, off.packets)
		}
	})
}

// TestGROMerges checks that the fuzz target's premise holds: in-order
// full segments of one flow do merge, so FuzzGRO compares merged
// deliveries, not the same packets twice.
func TestGROMerges(t *testing.T) {
	segs := groSegments([]byte{0, 0, 230, 0, 0x05, 0x64, 230, 0, 0x0a, 0xc8, 230, 0})
	r := newRecorder(t)
	ep, err := pktio.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ep.Attach(r)
	if _, err := ep.Write(segs, 0); err != nil {
		t.Fatal(err)
	}
	ep.Close()
	if r.packets != 1 || len(r.bytes) != 3*1380 {
		t.Fatalf("3 in-order segments of 1380 bytes: delivered %d packets with %d bytes, want 1 with %d", r.packets, len(r.bytes), 3*1380)
	}
}
