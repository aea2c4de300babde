package link

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Real packets: tcpdump -x on lo, while curl fetched a page from a local
// server over IPv4 and then IPv6 (Linux 6.x: timestamps on, so every
// segment after the SYNs carries NOP, NOP, TS).
const (
	linuxSYNACK4  = "4500003c0000400040063cba7f0000017f00000146a1ed626b765c27a83267d9a012ffcbfe3000000204ffd70402080a5084aa4d37c3f8b30103030a"
	linuxACK4     = "450000344d0e40004006efb37f0000017f000001ed6246a1a83267d96b765c2880100040fe2800000101080a37c3f8b35084aa4d"
	linuxRequest4 = "450000834d0f40004006ef637f0000017f000001ed6246a1a83267d96b765c2880180040fe7700000101080a37c3f8b35084aa4d474554202f20485454502f312e310d0a486f73743a203132372e302e302e313a31383038310d0a557365722d4167656e743a206375726c2f372e38382e310d0a4163636570743a202a2f2a0d0a0d0a"
	linuxFINACK4  = "450000344d1240004006efaf7f0000017f000001ed6246a1a83268286b7669f880110064fe2800000101080a37c3f8b95084aa53"
	linuxSYN6     = "6005a3de002806400000000000000000000000000000000100000000000000000000000000000001a4c446a172a5f2d200000000a002ffc4003000000204ffc40402080a189d1392000000000103030a"
	linuxACK6     = "6005a3de002006400000000000000000000000000000000100000000000000000000000000000001a4c446a172a5f2d3a910d22780100040002800000101080a189d139241ac0e53"
	linuxRequest6 = "6005a3de006b06400000000000000000000000000000000100000000000000000000000000000001a4c446a172a5f2d3a910d22780180040007300000101080a189d139241ac0e53474554202f20485454502f312e310d0a486f73743a205b3a3a315d3a31383038310d0a557365722d4167656e743a206375726c2f372e38382e310d0a4163636570743a202a2f2a0d0a0d0a"
)

// tcpOf returns the TCP segment of an IPv4 or IPv6 packet, as the
// callers of IsPureACK find it: from its first byte to the packet's end.
func tcpOf(t *testing.T, pkt []byte) []byte {
	t.Helper()
	switch header.IPVersion(pkt) {
	case header.IPv4Version:
		ip := header.IPv4(pkt)
		require.True(t, ip.IsValid(len(pkt)))
		return pkt[ip.HeaderLength():ip.TotalLength()]
	case header.IPv6Version:
		ip := header.IPv6(pkt)
		require.True(t, ip.IsValid(len(pkt)))
		return pkt[header.IPv6MinimumSize : header.IPv6MinimumSize+int(ip.PayloadLength())]
	}
	t.Fatalf("not an IP packet: %x", pkt)
	return nil
}

// edit returns a copy of the packet in hex with the TCP segment's byte at
// off (from the segment's start) set to v.
func edit(t *testing.T, pktHex string, off int, v byte) []byte {
	t.Helper()
	b, err := hex.DecodeString(pktHex)
	require.NoError(t, err)
	tcpOf(t, b)[off] = v
	return b
}

func packet(t *testing.T, pktHex string) []byte {
	t.Helper()
	b, err := hex.DecodeString(pktHex)
	require.NoError(t, err)
	return b
}

// TestIsPureACK runs the one pure-ACK test over real Linux segments of
// both IP versions and over the same segments made malformed. In the
// captured ACKs the options start at byte 20 of the segment: NOP (20),
// NOP (21), TS kind (22), TS length (23), then the two 4-byte values.
func TestIsPureACK(t *testing.T) {
	for _, c := range []struct {
		name string
		pkt  []byte
		// cut, if set, is the segment length the caller claims, short of
		// the real one (a caller that read a truncated packet).
		cut  int
		want bool
	}{
		{name: "IPv4 ACK with timestamps", pkt: packet(t, linuxACK4), want: true},
		{name: "IPv6 ACK with timestamps", pkt: packet(t, linuxACK6), want: true},
		{name: "IPv4 SYN-ACK", pkt: packet(t, linuxSYNACK4)},
		{name: "IPv6 SYN", pkt: packet(t, linuxSYN6)},
		{name: "IPv4 FIN-ACK", pkt: packet(t, linuxFINACK4)},
		{name: "IPv4 request with data", pkt: packet(t, linuxRequest4)},
		{name: "IPv6 request with data", pkt: packet(t, linuxRequest6)},
		{name: "IPv4 request's flags, no data", pkt: edit(t, linuxACK4, 13, byte(header.TCPFlagAck|header.TCPFlagPsh))},
		{name: "IPv4 ACK with ECE", pkt: edit(t, linuxACK4, 13, byte(header.TCPFlagAck|header.TCPFlagEce))},
		{name: "IPv6 ACK with CWR", pkt: edit(t, linuxACK6, 13, byte(header.TCPFlagAck|header.TCPFlagCwr))},
		{name: "IPv4 timestamp length byte 8", pkt: edit(t, linuxACK4, 23, 8)},
		{name: "IPv6 timestamp length byte 8", pkt: edit(t, linuxACK6, 23, 8)},
		{name: "IPv4 timestamp length byte 0", pkt: edit(t, linuxACK4, 23, 0)},
		{name: "IPv6 timestamp length byte 255", pkt: edit(t, linuxACK6, 23, 255)},
		{name: "IPv4 SACK-permitted where TS was", pkt: edit(t, linuxACK4, 22, header.TCPOptionSACKPermitted)},
		{name: "IPv6 SACK block kind where TS was", pkt: edit(t, linuxACK6, 22, header.TCPOptionSACK)},
		{name: "IPv4 EOL ends the options", pkt: edit(t, linuxACK4, 20, header.TCPOptionEOL), want: true},
		{name: "IPv6 NOPs only", pkt: func() []byte {
			b := packet(t, linuxACK6)
			copy(tcpOf(t, b)[20:], []byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
			return b
		}(), want: true},
		// A 28-byte header of a 28-byte segment: the timestamp option
		// needs 10 bytes from byte 22, the header ends at 28.
		{name: "IPv4 timestamps cut short by the data offset", pkt: edit(t, linuxACK4, 12, 7<<4), cut: 28},
		{name: "IPv6 data offset below the minimum", pkt: edit(t, linuxACK6, 12, 4<<4)},
		{name: "IPv4 data offset beyond the segment", pkt: edit(t, linuxACK4, 12, 15<<4)},
		{name: "IPv4 segment cut inside the options", pkt: packet(t, linuxACK4), cut: 30},
		{name: "IPv6 segment cut inside the fixed header", pkt: packet(t, linuxACK6), cut: 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			tcp := tcpOf(t, c.pkt)
			segLen := len(tcp)
			if c.cut > 0 {
				tcp, segLen = tcp[:c.cut], c.cut
			}
			require.Equal(t, c.want, IsPureACK(tcp, segLen))
			// A caller that holds more than the header (the payload, or
			// a pull-up of the longest header) decides the same.
			if c.cut == 0 {
				require.Equal(t, c.want, IsPureACK(append(tcp, make([]byte, 40)...), segLen), "with bytes beyond the segment")
			}
		})
	}
}

// BenchmarkIsPureACK is the cost of the decision on a real ACK with
// timestamps, the common case on both of its paths.
func BenchmarkIsPureACK(b *testing.B) {
	tcp, err := hex.DecodeString(linuxACK4)
	if err != nil {
		b.Fatal(err)
	}
	tcp = tcp[header.IPv4MinimumSize:]
	b.ReportAllocs()
	for b.Loop() {
		if !IsPureACK(tcp, len(tcp)) {
			b.Fatal("a real ACK is not pure")
		}
	}
}

func TestNetworkProtocol(t *testing.T) {
	for _, tc := range []struct {
		first byte
		want  tcpip.NetworkProtocolNumber
		ok    bool
	}{{0x45, header.IPv4ProtocolNumber, true}, {0x60, header.IPv6ProtocolNumber, true}, {0x00, 0, false}, {0x50, 0, false}} {
		got, ok := NetworkProtocol([]byte{tc.first, 0, 0, 0})
		require.Equal(t, tc.ok, ok, "%#x", tc.first)
		require.Equal(t, tc.want, got, "%#x", tc.first)
	}
	_, ok := NetworkProtocol(nil)
	require.False(t, ok, "an empty packet")
}
