package pktio_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/pktio"
)

// sink is a dispatcher that takes every packet and keeps none: what the
// endpoint costs, without the stack above it.
type sink struct{ packets, bytes int }

func (s *sink) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	s.packets++
	s.bytes += pkt.Size()
}

func (*sink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

var (
	src4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	dst4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 2})
)

// tcpSegment builds an IPv4 TCP segment of one flow with seq and payload
// and right checksums.
func tcpSegment(seq uint32, flags header.TCPFlags, payload []byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)),
		TTL:         64,
		Protocol:    uint8(header.TCPProtocolNumber),
		SrcAddr:     src4,
		DstAddr:     dst4,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(b[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{
		SrcPort: 40000, DstPort: 5001, SeqNum: seq, AckNum: 1,
		DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 65535,
	})
	copy(tcp.Payload(), payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src4, dst4, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	return b
}

// udpDatagram builds an IPv4 UDP datagram with n payload bytes.
func udpDatagram(n int) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+n)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: src4, DstAddr: dst4,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(b[header.IPv4MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: 40000, DstPort: 5001, Length: uint16(len(u))})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src4, dst4, uint16(len(u)))
	u.SetChecksum(^checksum.Checksum(u, xsum))
	return b
}

// attached returns an endpoint attached to a sink, closed at the end.
func attached(tb testing.TB, opts *pktio.Options) (*pktio.Endpoint, *sink) {
	ep, err := pktio.New(opts)
	require.NoError(tb, err)
	s := &sink{}
	ep.Attach(s)
	tb.Cleanup(ep.Close)
	return ep, s
}

// outbound returns n UDP packet buffers as the stack would hand them to
// WritePackets.
func outbound(n, size int) stack.PacketBufferList {
	var l stack.PacketBufferList
	for range n {
		l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(udpDatagram(size))}))
	}
	return l
}

func TestWriteAllocatesNothing(t *testing.T) {
	testenv.SkipUnderRace(t, "the race detector makes gVisor's sync.Pools drop items at random")
	for _, tc := range []struct {
		name string
		pkt  func(i int) []byte
	}{
		{"udp", func(int) []byte { return udpDatagram(1200) }},
		{"tcp-gro", func(i int) []byte { return tcpSegment(uint32(1+i*1000), header.TCPFlagAck, make([]byte, 1000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, s := attached(t, nil)
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = tc.pkt(i)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := ep.Write(bufs, 0); err != nil {
					t.Fatal(err)
				}
			})
			require.Zero(t, allocs, "allocations per Write of %d packets", len(bufs))
			require.NotZero(t, s.packets)
		})
	}
}

func TestReadAllocatesNothing(t *testing.T) {
	testenv.SkipUnderRace(t, "the race detector makes gVisor's sync.Pools drop items at random")
	ep, _ := attached(t, nil)
	const batch = 64
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, batch)
	pkts := outbound(batch, 1200)
	defer pkts.DecRef()
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := ep.WritePackets(pkts); n != batch || err != nil {
			t.Fatal(n, err)
		}
		if n, err := ep.Read(bufs, sizes, 0); n != batch || err != nil {
			t.Fatal(n, err)
		}
	})
	require.Zero(t, allocs, "allocations per WritePackets and Read of %d packets", batch)
	require.Equal(t, 1228, sizes[0])
	require.Equal(t, uint16(1228), binary.BigEndian.Uint16(bufs[0][2:]))
}

// BenchmarkWrite is the inbound path per packet, into a sink: a ladder
// from UDP (copy and checksum) to TCP through GRO and TCP with GRO off.
func BenchmarkWrite(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts pktio.Options
		pkt  func(i int) []byte
	}{
		{"udp1200", pktio.Options{}, func(int) []byte { return udpDatagram(1200) }},
		{"tcp1380-gro", pktio.Options{}, func(i int) []byte { return tcpSegment(uint32(1+i*1380), header.TCPFlagAck, make([]byte, 1380)) }},
		{"tcp1380-nogro", pktio.Options{NoGRO: true}, func(i int) []byte { return tcpSegment(uint32(1+i*1380), header.TCPFlagAck, make([]byte, 1380)) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ep, s := attached(b, &tc.opts)
			bufs := make([][]byte, 128)
			for i := range bufs {
				bufs[i] = tc.pkt(i)
			}
			b.SetBytes(int64(len(bufs[0]) * len(bufs)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := ep.Write(bufs, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(bufs))/b.Elapsed().Seconds(), "pkts/s")
			b.ReportMetric(float64(s.packets)/float64(b.N), "delivered/op")
		})
	}
}

// BenchmarkRead is the outbound path per packet: WritePackets of a batch
// and the Read that takes it.
func BenchmarkRead(b *testing.B) {
	ep, _ := attached(b, nil)
	const batch = 128
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, batch)
	pkts := outbound(batch, 1200)
	defer pkts.DecRef()
	b.SetBytes(1228 * batch)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ep.WritePackets(pkts)
		if _, err := ep.Read(bufs, sizes, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pkts/s")
}
