//go:build linux

package afpacket

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// superSegment builds a TCP super-segment as gVisor's TCP hands it to a
// host-GSO link: payload in views of 1 to maxView bytes (odd-sized ones
// among them), headers pushed in front, the TCP checksum the pseudo-header
// sum only.
func superSegment(t *testing.T, v6 bool, payload []byte, maxView int, mss uint16, flags header.TCPFlags) *stack.PacketBuffer {
	t.Helper()
	// Each view is a slice of one shared chunk, as the clones in gVisor's
	// send queue are: Append merges views only into an unshared chunk.
	backing := buffer.NewViewWithData(payload)
	defer backing.Release()
	var data buffer.Buffer
	for off := 0; off < len(payload); {
		n := min(len(payload)-off, 1+rand.IntN(maxView))
		v := backing.Clone()
		v.TrimFront(off)
		v.CapLength(n)
		data.Append(v)
		off += n
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 128, Payload: data})
	tcp := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize + 12))
	tcp.Encode(&header.TCPFields{SrcPort: 80, DstPort: 40000, SeqNum: 0xfffff000, AckNum: 7, DataOffset: header.TCPMinimumSize + 12, Flags: flags, WindowSize: 512})
	copy(tcp[header.TCPMinimumSize:], []byte{1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8})
	tl := uint16(len(tcp) + len(payload))
	pkt.GSOOptions = stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: header.TCPChecksumOffset, MSS: mss}
	var src, dst tcpip.Address
	proto := header.IPv4ProtocolNumber
	if v6 {
		src, dst, proto = src6, dst6, header.IPv6ProtocolNumber
		pkt.GSOOptions.Type = stack.GSOTCPv6
		ip := header.IPv6(pkt.NetworkHeader().Push(header.IPv6MinimumSize))
		ip.Encode(&header.IPv6Fields{PayloadLength: tl, TransportProtocol: header.TCPProtocolNumber, HopLimit: 64, SrcAddr: src, DstAddr: dst})
	} else {
		src, dst = src4, dst4
		ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
		ip.Encode(&header.IPv4Fields{TotalLength: header.IPv4MinimumSize + tl, ID: 100, Flags: header.IPv4FlagDontFragment, TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	tcp.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, tl))
	pkt.NetworkProtocolNumber = proto
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{SrcAddr: macA, DstAddr: macB, Type: proto})
	return pkt
}

// sentFrames returns the bytes each message of msgs would send.
func sentFrames(msgs []unix.Mmsghdr) [][]byte {
	var out [][]byte
	for _, m := range msgs {
		iovs := unsafe.Slice(m.Hdr.Iov, m.Hdr.Iovlen)
		var f []byte
		for _, iov := range iovs {
			f = append(f, unsafe.Slice(iov.Base, iov.Len)...)
		}
		out = append(out, f)
	}
	return out
}

func TestCutSuperSegment(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, tc := range []struct{ size, maxView int }{
			{1, 9000}, {1448, 9000}, {1449, 9000}, {3 * 1448, 9000}, {65000 - 7, 9000},
			// A payload of 1-byte views: a frame's payload would
			// take more iovecs than a message may have.
			{3*1448 + 5, 1},
		} {
			size := tc.size
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(rand.Uint32())
			}
			const mss = 1448
			pkt := superSegment(t, v6, payload, tc.maxView, mss, header.TCPFlagAck|header.TCPFlagPsh|header.TCPFlagCwr)
			s := newTXScratch(4) // fewer messages than most packets need
			msgs := s.build([]*stack.PacketBuffer{pkt, pkt}, false)
			want := (size + mss - 1) / mss
			if 2*want <= 4 {
				require.Len(t, msgs, 2*want, "v6=%v size %d: both packets fit", v6, size)
			} else {
				require.Len(t, msgs, want, "v6=%v size %d: a lone packet takes all its frames", v6, size)
			}
			var got []byte
			for i, m := range msgs {
				require.LessOrEqual(t, int(m.Hdr.Iovlen), maxIovPerMsg, "message %d: at most UIO_MAXIOV iovecs", i)
			}
			for i, f := range sentFrames(msgs[:want]) {
				require.Equal(t, i == want-1, s.lasts[i])
				require.Len(t, f, s.sizes[i], "frame %d: its length for TXBytes", i)
				ipb := f[header.EthernetMinimumSize:]
				var tcp header.TCP
				var src, dst tcpip.Address
				if v6 {
					ip := header.IPv6(ipb)
					require.Equal(t, len(ipb)-header.IPv6MinimumSize, int(ip.PayloadLength()))
					tcp, src, dst = header.TCP(ip.Payload()), ip.SourceAddress(), ip.DestinationAddress()
				} else {
					ip := header.IPv4(ipb)
					require.Equal(t, len(ipb), int(ip.TotalLength()))
					require.True(t, ip.IsChecksumValid(), "frame %d: IPv4 checksum", i)
					require.Equal(t, uint16(100+i), ip.ID())
					tcp, src, dst = header.TCP(ip.Payload()), ip.SourceAddress(), ip.DestinationAddress()
				}
				body := tcp.Payload()
				require.LessOrEqual(t, len(body), mss)
				xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)))
				require.Equal(t, uint16(0xffff), checksum.Checksum(tcp, xsum), "frame %d: TCP checksum", i)
				require.Equal(t, uint32(0xfffff000+i*mss), tcp.SequenceNumber(), "frame %d", i)
				require.Equal(t, i == want-1, tcp.Flags()&header.TCPFlagPsh != 0, "frame %d: PSH on the last only", i)
				require.Equal(t, i == 0, tcp.Flags()&header.TCPFlagCwr != 0, "frame %d: CWR on the first only", i)
				got = append(got, body...)
			}
			require.True(t, bytes.Equal(payload, got), "v6=%v size %d: the frames carry the payload in order", v6, size)
			s.clear()
			pkt.DecRef()
		}
	}
}
