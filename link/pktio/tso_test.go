package pktio_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/link/vnet"
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
	opts    []byte // if not nil, the TCP options as they are, in place of ts and sack
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
	if s.opts != nil {
		return s.opts
	}
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

// readN reads n packets from ep into buffers larger than the MTU, a few
// per Read so that super-segments are also handed out across Reads, and
// fails if there are more or fewer (Read would block).
func readN(t *testing.T, ep *pktio.Endpoint, perRead, n int) [][]byte {
	t.Helper()
	var out [][]byte
	sizes := make([]int, perRead)
	for len(out) < n {
		bufs := make([][]byte, perRead)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		k, err := ep.Read(bufs, sizes, 0)
		require.NoError(t, err)
		for i := range k {
			out = append(out, bufs[i][:sizes[i]])
		}
	}
	require.Len(t, out, n, "packets read")
	require.Zero(t, ep.Backlog(), "packets left unread")
	return out
}

// checkCut checks that pkts are spec cut into segments of want payload
// bytes each (the last may be shorter): right checksums, contiguous
// sequence numbers and payload, spec's options on every segment, lengths
// in the IP header, PSH and FIN on the last segment only.
func checkCut(t *testing.T, spec tsoSpec, pkts [][]byte, want int) {
	t.Helper()
	opts := spec.tcpOptions()
	l3 := header.IPv4MinimumSize
	if spec.v6 {
		l3 = header.IPv6MinimumSize
	}
	hlen := l3 + header.TCPMinimumSize + len(opts)
	require.Len(t, pkts, (len(spec.payload)+want-1)/want, "segments")
	var got []byte
	for i, p := range pkts {
		last := i == len(pkts)-1
		require.Equal(t, vnet.Verified, vnet.CheckIP(p), "segment %d: checksums", i)
		if !last {
			require.Len(t, p, hlen+want, "segment %d", i)
		}
		if spec.v6 {
			require.Equal(t, len(p)-l3, int(header.IPv6(p).PayloadLength()), "segment %d: IPv6 payload length", i)
		} else {
			require.Equal(t, len(p), int(header.IPv4(p).TotalLength()), "segment %d: IPv4 total length", i)
		}
		tcp := header.TCP(p[l3:])
		require.Equal(t, spec.seq+uint32(len(got)), tcp.SequenceNumber(), "segment %d: sequence number", i)
		require.Equal(t, string(opts), string(tcp.Options()), "segment %d: options", i)
		wantFlags := spec.flags
		if !last {
			wantFlags &^= header.TCPFlagPsh | header.TCPFlagFin
		}
		require.Equal(t, wantFlags, tcp.Flags(), "segment %d: flags", i)
		got = append(got, tcp.Payload()...)
	}
	require.Equal(t, spec.payload, got, "payload")
}

// writeAndCut hands ep the super-segment spec, reads what Read makes of
// it, perRead packets at a time, checks that it is spec cut into
// segments of want(hlen) payload bytes (hlen: a segment's IP and TCP
// headers), and returns the segments.
func writeAndCut(t *testing.T, ep *pktio.Endpoint, spec tsoSpec, perRead int, want func(hlen int) int) [][]byte {
	t.Helper()
	pkt := spec.build()
	n, err := ep.WritePackets(listOf(pkt))
	pkt.DecRef()
	require.Nil(t, err)
	require.Equal(t, 1, n)
	size := want(ipHeaderLen(spec.v6) + header.TCPMinimumSize + len(spec.tcpOptions()))
	pkts := readN(t, ep, perRead, (len(spec.payload)+size-1)/size)
	checkCut(t, spec, pkts, size)
	return pkts
}

// TestReadFillsMTU hands the endpoint super-segments as gVisor's TCP
// makes them, with the MSS it gives them on the link (its room for
// options reserved, with or without SACK agreed), and checks that Read
// cuts them so that every segment but the last is exactly MTU bytes,
// whatever the options, IPv4 and IPv6.
func TestReadFillsMTU(t *testing.T) {
	for _, mtu := range []int{pktio.DefaultMTU, pktio.MinMTU} {
		for _, v6 := range []bool{false, true} {
			for _, c := range []struct {
				name    string
				ts      bool
				sackOK  bool // SACK agreed: gVisor reserves room for blocks
				blocks  int  // SACK blocks this segment carries
				payload int
			}{
				{"ts+sack", true, true, 0, 64000},
				{"ts+sack-blocks", true, true, 2, 64000},
				{"ts", true, false, 0, 64000},
				{"sack", false, true, 0, 64000},
				{"sack-blocks", false, true, 4, 20000},
				{"bare", false, false, 0, 64000},
				{"ts+sack-short-tail", true, true, 0, 5 * 1000},
			} {
				name := fmt.Sprintf("mtu%d/v6=%v/%s", mtu, v6, c.name)
				t.Run(name, func(t *testing.T) {
					ep, _ := attached(t, &pktio.Options{MTU: uint32(mtu)})
					spec := tsoSpec{
						v6: v6, ts: c.ts, sack: c.blocks,
						mss:     gvisorMSS(mtu, v6, c.ts, c.sackOK),
						payload: pattern(c.payload), seq: 0xfffff000, // wraps
						flags: header.TCPFlagAck | header.TCPFlagPsh | header.TCPFlagFin,
					}
					pkts := writeAndCut(t, ep, spec, 7, func(hlen int) int { return mtu - hlen })
					for i, p := range pkts[:len(pkts)-1] {
						require.Len(t, p, mtu, "segment %d of %d", i, len(pkts))
					}
				})
			}
		}
	}
}

// TestReadKeepsSmallerMSS checks that segments bounded below the MTU (a
// peer's small MSS, a lowered path MTU) are cut at gVisor's MSS, and that
// an MSS above what the MTU allows (the link's MTU lowered under a
// connection) is cut to the MTU.
func TestReadKeepsSmallerMSS(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, c := range []struct {
			name string
			mss  int
			want func(hlen int) int
		}{
			{"peer-mss-536", 536 - 40, func(int) int { return 536 - 40 }},
			{"path-mtu-1400", gvisorMSS(1400, v6, true, true), func(int) int { return gvisorMSS(1400, v6, true, true) }},
			{"mtu-lowered", gvisorMSS(9000, v6, true, true), func(hlen int) int { return pktio.DefaultMTU - hlen }},
		} {
			t.Run(fmt.Sprintf("v6=%v/%s", v6, c.name), func(t *testing.T) {
				ep, _ := attached(t, nil)
				spec := tsoSpec{v6: v6, ts: true, mss: c.mss, payload: pattern(30000), flags: header.TCPFlagAck}
				writeAndCut(t, ep, spec, 64, c.want)
			})
		}
	}
}

func ipHeaderLen(v6 bool) int {
	if v6 {
		return header.IPv6MinimumSize
	}
	return header.IPv4MinimumSize
}

func listOf(pkts ...*stack.PacketBuffer) stack.PacketBufferList {
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(p)
	}
	return l
}

// FuzzReadCut hands the endpoint super-segments with any TCP options (up
// to TCP's 40 bytes), MSS, payload length and MTU, and checks what Read
// makes of them: no packet larger than the MTU, every segment but the
// last of one size, checksums right, sequence numbers and payload
// contiguous (checkCut).
func FuzzReadCut(f *testing.F) {
	ts := tsoSpec{ts: true, sack: 3}.tcpOptions()
	f.Add(false, ts[:12], uint16(gvisorMSS(1420, false, true, true)), uint16(64000), uint16(1420))
	f.Add(true, ts, uint16(gvisorMSS(1280, true, true, true)), uint16(5000), uint16(1280))
	f.Add(false, []byte{}, uint16(536), uint16(3000), uint16(1500))
	f.Add(true, []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 1, 2, 3, 4, 5, 6, 7, 8}, uint16(1), uint16(100), uint16(9000))
	f.Fuzz(func(t *testing.T, v6 bool, opts []byte, mss, payload, mtu uint16) {
		opts = opts[:min(len(opts), 40)&^3] // a TCP header holds 40 bytes of options, in 4-byte words
		mtu = pktio.MinMTU + mtu%(9000-pktio.MinMTU)
		payload = 1 + payload%60000
		if mss == 0 {
			mss = 1
		}
		// A super-segment of more segments than Read has buffers for in
		// all is no case gVisor makes (its MSS is hundreds of bytes).
		hlen := ipHeaderLen(v6) + header.TCPMinimumSize + len(opts)
		if int(payload)/int(min(int(mss), int(mtu)-hlen)) > 1000 {
			return
		}
		ep, _ := attached(t, &pktio.Options{MTU: uint32(mtu)})
		spec := tsoSpec{v6: v6, opts: append([]byte{}, opts...), mss: int(mss), payload: pattern(int(payload)), flags: header.TCPFlagAck | header.TCPFlagPsh}
		pkt := spec.build()
		n, err := ep.WritePackets(listOf(pkt))
		pkt.DecRef()
		require.Nil(t, err)
		require.Equal(t, 1, n)
		var pkts [][]byte
		got := 0
		bufs, sizes := make([][]byte, 64), make([]int, 64)
		for got < int(payload) {
			for i := range bufs {
				bufs[i] = make([]byte, int(mtu)+64)
			}
			k, err := ep.Read(bufs, sizes, 0)
			require.NoError(t, err)
			for i := range k {
				require.LessOrEqual(t, sizes[i], int(mtu), "a packet larger than the MTU")
				pkts = append(pkts, bufs[i][:sizes[i]])
				got += sizes[i] - hlen
			}
		}
		checkCut(t, spec, pkts, len(pkts[0])-hlen)
	})
}
