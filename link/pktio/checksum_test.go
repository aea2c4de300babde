package pktio_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/link/vnet"
)

// ipPacket builds an IPv4 or IPv6 packet carrying a TCP segment (a bare
// 20-byte header) or a UDP datagram with payload, all checksums right.
func ipPacket(v6 bool, proto tcpip.TransportProtocolNumber, payload []byte) []byte {
	l4 := header.UDPMinimumSize
	if proto == header.TCPProtocolNumber {
		l4 = header.TCPMinimumSize
	}
	l3 := ipHeaderLen(v6)
	b := make([]byte, l3+l4+len(payload))
	src, dst := src4, dst4
	if v6 {
		src, dst = src6, dst6
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength: uint16(l4 + len(payload)), TransportProtocol: proto,
			HopLimit: 64, SrcAddr: src, DstAddr: dst,
		})
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(proto),
			SrcAddr: src, DstAddr: dst,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	t := b[l3:]
	copy(t[l4:], payload)
	xsum := header.PseudoHeaderChecksum(proto, src, dst, uint16(len(t)))
	if proto == header.TCPProtocolNumber {
		tcp := header.TCP(t)
		tcp.Encode(&header.TCPFields{
			SrcPort: 40000, DstPort: 5001, SeqNum: 1, AckNum: 1,
			DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 65535,
		})
		tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	} else {
		u := header.UDP(t)
		u.Encode(&header.UDPFields{SrcPort: 40000, DstPort: 5001, Length: uint16(len(u))})
		u.SetChecksum(^checksum.Checksum(u, xsum))
	}
	return b
}

// TestWriteDropsBadChecksums writes packets whose TCP, UDP or IPv4
// header checksum is wrong. The endpoint claims RX checksum offload, so
// gVisor checks none of them: Write must drop each and count it in
// RXBadChecksum. The same packet with its checksums right is delivered
// first, so that the drop is the checksum's doing. Write may deliver
// from the receive goroutine (when a round runs there), so what was
// delivered is read from a Sink once it has arrived: a good packet
// written after the bad one must be the second delivered, which it is
// not if the bad one went up.
func TestWriteDropsBadChecksums(t *testing.T) {
	payload := pattern(600)
	for _, c := range []struct {
		name    string
		v6      bool
		proto   tcpip.TransportProtocolNumber
		corrupt func(b []byte) // makes one checksum wrong
	}{
		{"tcp4-payload", false, header.TCPProtocolNumber, func(b []byte) { b[len(b)-1] ^= 0x40 }},
		{"tcp6-checksum", true, header.TCPProtocolNumber, func(b []byte) { b[header.IPv6MinimumSize+header.TCPChecksumOffset] ^= 1 }},
		{"udp4-payload", false, header.UDPProtocolNumber, func(b []byte) { b[len(b)-100] ^= 0x01 }},
		{"udp6-checksum", true, header.UDPProtocolNumber, func(b []byte) { b[header.IPv6MinimumSize+6] ^= 0x80 }}, // UDP's checksum field
		{"ipv4-header", false, header.UDPProtocolNumber, func(b []byte) { b[8]-- }},                               // the TTL, which no other checksum covers
	} {
		for _, vnetHdr := range []bool{false, true} {
			name := c.name
			if vnetHdr {
				name += "/vnet" // a header without a checksum verdict: checked too
			}
			t.Run(name, func(t *testing.T) {
				ep, err := pktio.New(&pktio.Options{VNetHeader: vnetHdr})
				require.NoError(t, err)
				s := linktest.NewSink()
				ep.Attach(s)
				t.Cleanup(ep.Close)
				frame := func(pkt []byte) [][]byte {
					if !vnetHdr {
						return [][]byte{pkt}
					}
					b := make([]byte, vnet.HeaderSize+len(pkt))
					vnet.Header{}.Encode(b)
					copy(b[vnet.HeaderSize:], pkt)
					return [][]byte{b}
				}
				good := ipPacket(c.v6, c.proto, payload)
				_, err = ep.Write(frame(good), 0)
				require.NoError(t, err)
				require.Equal(t, good, s.Wait(t, 1)[0].Data, "the packet with right checksums")
				require.Zero(t, ep.LinkStats().RXBadChecksum)

				bad := bytes.Clone(good)
				c.corrupt(bad)
				require.Equal(t, vnet.Bad, vnet.CheckIP(bad), "the corruption must break a checksum")
				_, err = ep.Write(frame(bad), 0)
				require.NoError(t, err)
				_, err = ep.Write(frame(good), 0)
				require.NoError(t, err)
				require.Equal(t, good, s.Wait(t, 2)[1].Data, "a packet with a wrong checksum was delivered")
				st := ep.LinkStats()
				require.Equal(t, uint64(1), st.RXBadChecksum)
				require.Equal(t, uint64(2), st.RXPackets)
				require.Zero(t, st.RXMalformed+st.RXErrors)
			})
		}
	}
}
