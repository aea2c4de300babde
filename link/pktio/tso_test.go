package pktio_test

import (
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/pktio"
)

var (
	src6 = tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 1})
	dst6 = tcpip.AddrFrom16([16]byte{0: 0xfd, 15: 2})
)

// tsoSpec describes a TCP super-segment as gVisor's TCP hands it to an
// endpoint that declares host GSO.
type tsoSpec struct {
	v6      bool
	ts      bool // a timestamp option, as gVisor sends when both ends agreed to them
	sack    int  // SACK blocks in the options (0 to 3 with a timestamp, 4 without)
	mss     int  // GSOOptions.MSS
	payload []byte
	seq     uint32
	flags   header.TCPFlags
}

// gvisorMSS is the MSS gVisor's TCP puts in GSOOptions on a link of mtu
// bytes when the link's MTU bounds it: the route's MTU (the link's less a
// minimum IP header), less a TCP header, less the room for the most
// options the connection could send (RFC 6691). With timestamps and SACK
// that room is 40 bytes (12 for the timestamp, 28 for three SACK blocks);
// SACK alone 36 (four blocks); timestamps alone 12 (tcp.Endpoint.
// maxOptionSize).
func gvisorMSS(mtu int, v6, ts, sack bool) int {
	l3 := header.IPv4MinimumSize
	if v6 {
		l3 = header.IPv6MinimumSize
	}
	room := 0
	switch {
	case ts && sack:
		room = 40
	case sack:
		room = 36
	case ts:
		room = 12
	}
	return mtu - l3 - header.TCPMinimumSize - room
}

// tcpOptions returns the options of s, in gVisor's encoding (two NOPs
// before each option, so that the length is a multiple of 4).
func (s tsoSpec) tcpOptions() []byte {
	var o []byte
	if s.ts {
		o = append(o, header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, header.TCPOptionTSLength)
		o = append(o, 0, 1, 2, 3, 4, 5, 6, 7)
	}
	if s.sack > 0 {
		o = append(o, header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, byte(2+8*s.sack))
		for i := range s.sack {
			edge := s.seq + uint32(100000*(i+1))
			o = append(o, byte(edge>>24), byte(edge>>16), byte(edge>>8), byte(edge), byte(edge>>24), byte(edge>>16), byte(edge>>8), byte(edge+10))
		}
	}
	return o
}

// build returns s as a packet buffer with one reference, which the
// caller owns.
func (s tsoSpec) build() *stack.PacketBuffer {
	opts := s.tcpOptions()
	tcpLen := header.TCPMinimumSize + len(opts)
	l3 := header.IPv4MinimumSize
	if s.v6 {
		l3 = header.IPv6MinimumSize
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: l3 + tcpLen,
		Payload:            buffer.MakeWithData(s.payload),
	})
	tcp := header.TCP(pkt.TransportHeader().Push(tcpLen))
	tcp.Encode(&header.TCPFields{
		SrcPort: 40000, DstPort: 5001, SeqNum: s.seq, AckNum: 1,
		DataOffset: uint8(tcpLen), Flags: s.flags, WindowSize: 65535,
	})
	copy(tcp[header.TCPMinimumSize:], opts)
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	total := l3 + tcpLen + len(s.payload)
	gsoType := stack.GSOTCPv4
	var src, dst tcpip.Address
	if s.v6 {
		src, dst = src6, dst6
		header.IPv6(pkt.NetworkHeader().Push(l3)).Encode(&header.IPv6Fields{
			PayloadLength:     uint16(total - l3),
			TransportProtocol: header.TCPProtocolNumber,
			HopLimit:          64,
			SrcAddr:           src,
			DstAddr:           dst,
		})
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
		gsoType = stack.GSOTCPv6
	} else {
		src, dst = src4, dst4
		ip := header.IPv4(pkt.NetworkHeader().Push(l3))
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(total),
			ID:          7,
			TTL:         64,
			Protocol:    uint8(header.TCPProtocolNumber),
			SrcAddr:     src,
			DstAddr:     dst,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	}
	// As gVisor leaves it for a device with checksum offload: the
	// pseudo-header sum without the length, for the device to complete.
	tcp.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, 0))
	pkt.GSOOptions = stack.GSO{
		Type:       gsoType,
		NeedsCsum:  true,
		CsumOffset: header.TCPChecksumOffset,
		MSS:        uint16(s.mss),
		L3HdrLen:   uint16(l3),
		MaxSize:    pktio.GSOMaxSize,
	}
	return pkt
}

// pattern returns n bytes that differ from their neighbours, so that a
// byte out of place shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// BenchmarkReadTSO is the outbound path of bulk TCP: gVisor's TSO
// super-segments of 64000 payload bytes at the default MTU, with a
// timestamp option and the MSS gVisor gives them (room reserved for
// three SACK blocks), cut by Read into MTU-sized buffers. An operation is
// one super-segment; segs/op is how many packets Read made of it.
func BenchmarkReadTSO(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		b.Run(name, func(b *testing.B) {
			ep, _ := attached(b, nil)
			spec := tsoSpec{v6: v6, ts: true, mss: gvisorMSS(pktio.DefaultMTU, v6, true, true), payload: pattern(64000), flags: header.TCPFlagAck}
			var pkts stack.PacketBufferList
			pkts.PushBack(spec.build())
			defer pkts.DecRef()
			bufs := make([][]byte, 256) // more than a super-segment's segments: one Read takes it all
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, len(bufs))
			segs := 0
			b.SetBytes(int64(len(spec.payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if n, err := ep.WritePackets(pkts); n != 1 || err != nil {
					b.Fatal(n, err)
				}
				n, err := ep.Read(bufs, sizes, 0)
				if err != nil {
					b.Fatal(err)
				}
				segs += n
			}
			b.ReportMetric(float64(segs)/float64(b.N), "segs/op")
			b.ReportMetric(float64(segs)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}
