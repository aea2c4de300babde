package linkutil

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TrimPadding returns frame, an IP packet of protocol proto behind a link
// header of linkHdr bytes, cut to the packet's own length: an Ethernet
// frame shorter than Ethernet's minimum arrives padded, and GRO, which
// takes a segment's payload to be the rest of the packet, would count the
// padding as data. A frame whose lengths do not add up, or that is not
// IPv4 or IPv6, is returned whole, for the stack to judge. frame must be
// at least linkHdr bytes long.
func TrimPadding(frame []byte, linkHdr int, proto tcpip.NetworkProtocolNumber) []byte {
	ip := frame[linkHdr:]
	n := len(ip)
	switch proto {
	case header.IPv4ProtocolNumber:
		if len(ip) >= header.IPv4MinimumSize {
			n = int(header.IPv4(ip).TotalLength())
		}
	case header.IPv6ProtocolNumber:
		if len(ip) >= header.IPv6MinimumSize {
			n = header.IPv6MinimumSize + int(header.IPv6(ip).PayloadLength())
		}
	}
	if n < len(ip) && n > 0 {
		return frame[:linkHdr+n]
	}
	return frame
}
