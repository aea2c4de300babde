package vnet

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Verdict says what to make of a received packet's checksums.
type Verdict int

// Verdicts of Inspect.
const (
	// Trusted: the kernel verified it (DATA_VALID) or generated it with a
	// partial checksum it vouches for (NEEDS_CSUM).
	Trusted Verdict = iota
	// Verified: no kernel verdict; ustack checked the IP and transport
	// checksums and they are right.
	Verified
	// Bad: a checksum is wrong.
	Bad
	// Malformed: the packet is too short for its headers, or its length
	// fields disagree with its size, or it is neither IPv4 nor IPv6, so
	// there is nothing to check.
	Malformed
)

// Inspect decides whether the IP packet ip (network header first), which
// arrived behind header h, may be handed to a stack that does not verify
// checksums (an endpoint claiming RX checksum offload). Packets with a
// kernel verdict are trusted; the others are verified here: the IPv4 header
// checksum, and the TCP, UDP or ICMP checksum of unfragmented packets (a
// fragment's transport checksum covers the whole datagram and cannot be
// checked piecewise).
func Inspect(h Header, ip []byte) Verdict {
	if h.Flags&(FlagNeedsCsum|FlagDataValid) != 0 {
		return Trusted
	}
	return CheckIP(ip)
}

// VerifyIP reports whether CheckIP finds the packet's checksums right.
func VerifyIP(ip []byte) bool { return CheckIP(ip) == Verified }

// CheckIP checks the checksums of an IPv4 or IPv6 packet as described for
// Inspect: Verified, Bad (a checksum is wrong) or Malformed.
func CheckIP(ip []byte) Verdict {
	if len(ip) == 0 {
		return Malformed
	}
	var (
		proto    uint8
		payload  []byte
		src, dst tcpip.Address
	)
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		h := header.IPv4(ip)
		if !h.IsValid(len(ip)) {
			return Malformed
		}
		if !h.IsChecksumValid() {
			return Bad
		}
		if h.More() || h.FragmentOffset() != 0 {
			return Verified
		}
		proto, src, dst = h.Protocol(), h.SourceAddress(), h.DestinationAddress()
		payload = ip[h.HeaderLength():h.TotalLength()]
	case header.IPv6Version:
		if len(ip) < header.IPv6MinimumSize {
			return Malformed
		}
		h := header.IPv6(ip)
		end := header.IPv6MinimumSize + int(h.PayloadLength())
		if end > len(ip) {
			return Malformed
		}
		// Only the common case, no extension headers, is checked here;
		// others (fragments among them) are left to gVisor's parser.
		proto, src, dst = h.NextHeader(), h.SourceAddress(), h.DestinationAddress()
		payload = ip[header.IPv6MinimumSize:end]
	default:
		return Malformed
	}
	var pseudo bool
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber:
		if len(payload) < header.TCPMinimumSize {
			return Malformed
		}
		pseudo = true
	case header.UDPProtocolNumber:
		if len(payload) < header.UDPMinimumSize {
			return Malformed
		}
		if header.UDP(payload).Checksum() == 0 && header.IPVersion(ip) == header.IPv4Version {
			return Verified // no checksum: allowed on IPv4 (RFC 768)
		}
		pseudo = true
	case header.ICMPv4ProtocolNumber:
		pseudo = false
	case header.ICMPv6ProtocolNumber:
		pseudo = true
	default:
		return Verified // not ours to check; gVisor handles or rejects it
	}
	sum := uint16(0)
	if pseudo {
		sum = header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), src, dst, uint16(len(payload)))
	}
	if checksum.Checksum(payload, sum) != 0xffff {
		return Bad
	}
	return Verified
}

// Complete finishes a partial checksum in place, as a device does for
// FlagNeedsCsum: the field at CsumStart+CsumOffset holds the pseudo-header
// sum, so summing from CsumStart to the end includes it; the folded sum,
// inverted, is the checksum. ustack needs it when a packet with a partial
// checksum must go somewhere that will not complete it. h must have passed
// Check for len(b).
func Complete(h Header, b []byte) {
	start, at := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	sum := ^checksum.Checksum(b[start:], 0)
	if sum == 0 && h.CsumOffset == udpChecksumOffset {
		sum = 0xffff // a computed UDP checksum of 0 is sent as all ones
	}
	binary.BigEndian.PutUint16(b[at:], sum)
}

// udpChecksumOffset is where the checksum sits in a UDP header.
const udpChecksumOffset = 6
