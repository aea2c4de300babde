package linkutil

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestTrimPadding(t *testing.T) {
	ip4 := make([]byte, header.IPv4MinimumSize+8)
	header.IPv4(ip4).Encode(&header.IPv4Fields{TotalLength: uint16(len(ip4)), Protocol: uint8(header.UDPProtocolNumber), TTL: 1})
	ip6 := make([]byte, header.IPv6MinimumSize+8)
	header.IPv6(ip6).Encode(&header.IPv6Fields{PayloadLength: 8, TransportProtocol: header.UDPProtocolNumber, HopLimit: 1})
	pad := make([]byte, 10)
	for _, tc := range []struct {
		name    string
		linkHdr int
		frame   []byte
		proto   tcpip.NetworkProtocolNumber
		want    int
	}{
		{"IPv4 padded", 14, append(append(make([]byte, 14), ip4...), pad...), header.IPv4ProtocolNumber, 14 + len(ip4)},
		{"IPv6 padded", 14, append(append(make([]byte, 14), ip6...), pad...), header.IPv6ProtocolNumber, 14 + len(ip6)},
		{"no link header", 0, append(append([]byte(nil), ip4...), pad...), header.IPv4ProtocolNumber, len(ip4)},
		{"exact", 14, append(make([]byte, 14), ip4...), header.IPv4ProtocolNumber, 14 + len(ip4)},
		{"longer than the frame", 14, append(make([]byte, 14), ip4[:24]...), header.IPv4ProtocolNumber, 14 + 24},
		{"cut header", 14, append(make([]byte, 14), ip4[:10]...), header.IPv4ProtocolNumber, 14 + 10},
		{"not IP", 14, append(append(make([]byte, 14), ip4...), pad...), header.ARPProtocolNumber, 14 + len(ip4) + len(pad)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TrimPadding(tc.frame, tc.linkHdr, tc.proto)
			require.Len(t, got, tc.want)
			require.Same(t, &tc.frame[0], &got[0], "a prefix of the frame, not a copy")
		})
	}
}
