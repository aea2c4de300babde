package tun

import (
	"encoding/binary"
	"errors"
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link/vnet"
)

// maxUDPSegments is the most datagrams the kernel packs into one UDP
// super-packet (UDP_MAX_SEGMENTS in include/linux/udp.h); the kernel
// refuses more, and so does splitUSO.
const maxUDPSegments = 128

// splitUSO cuts the UDP super-packet in frame, which arrived behind header
// h (GSO type UDP_L4) and starts with a link header of linkHdr bytes (an
// Ethernet header on a TAP device, none on TUN), into datagrams of at
// most h.GSOSize payload bytes, as the kernel's __udp_gso_segment would:
// each gets a copy of the link, IP and UDP headers with its own lengths,
// the IPv4 ID incremented per datagram, and full IPv4 and UDP checksums.
// h's offsets count from the frame's start, as the kernel's do. Each
// datagram is built in scratch, which must hold the headers plus
// h.GSOSize bytes, and handed to emit, which must copy what it keeps
// before returning. Once the packet has passed every check, and before
// the first emit, it tells count how many datagrams will follow, so
// counters are up to date by the time a reader sees the first of them. It
// returns how many datagrams it emitted, or an error (and emits nothing)
// if the packet is malformed.
func splitUSO(h vnet.Header, frame []byte, linkHdr int, scratch []byte, count func(n int), emit func([]byte)) (int, error) {
	if h.Flags&vnet.FlagNeedsCsum == 0 {
		return 0, errors.New("UDP super-packet without a partial checksum")
	}
	if len(frame) < linkHdr {
		return 0, fmt.Errorf("UDP super-packet of %d bytes, shorter than its %d-byte link header", len(frame), linkHdr)
	}
	ip := frame[linkHdr:]
	l4 := int(h.CsumStart) - linkHdr
	seg := int(h.GSOSize)
	if int(h.CsumOffset) != udpChecksumOffset || l4 < 0 || l4+header.UDPMinimumSize > len(ip) {
		return 0, fmt.Errorf("UDP super-packet with its checksum at %d+%d in %d bytes", h.CsumStart, h.CsumOffset, len(frame))
	}
	var src, dst tcpip.Address
	var id uint16
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		if len(ip) < header.IPv4MinimumSize {
			return 0, errors.New("UDP super-packet with a truncated IPv4 header")
		}
		v4 := header.IPv4(ip)
		if int(v4.HeaderLength()) < header.IPv4MinimumSize {
			return 0, fmt.Errorf("UDP super-packet with a %d-byte IPv4 header", v4.HeaderLength())
		}
		if int(v4.HeaderLength()) != l4 || v4.Protocol() != uint8(header.UDPProtocolNumber) {
			return 0, fmt.Errorf("UDP super-packet whose IPv4 header (%d bytes, protocol %d) does not lead to UDP at %d", v4.HeaderLength(), v4.Protocol(), l4)
		}
		src, dst, id = v4.SourceAddress(), v4.DestinationAddress(), v4.ID()
	case header.IPv6Version:
		if l4 < header.IPv6MinimumSize {
			return 0, fmt.Errorf("UDP super-packet with UDP at %d inside the IPv6 header", l4)
		}
		v6 := header.IPv6(ip)
		if at, ok := ipv6UDPOffset(ip); !ok || at != l4 {
			return 0, fmt.Errorf("UDP super-packet whose IPv6 headers do not lead to UDP at %d", l4)
		}
		src, dst = v6.SourceAddress(), v6.DestinationAddress()
	default:
		return 0, errors.New("UDP super-packet that is neither IPv4 nor IPv6")
	}
	payload := ip[l4+header.UDPMinimumSize:]
	hdrLen := linkHdr + l4 + header.UDPMinimumSize // the headers, from the frame's start
	total := (len(payload) + seg - 1) / seg
	switch {
	case len(payload) == 0:
		return 0, errors.New("UDP super-packet without payload")
	case total > maxUDPSegments:
		return 0, fmt.Errorf("UDP super-packet of %d datagrams: more than the kernel's %d", total, maxUDPSegments)
	case hdrLen+min(seg, len(payload)) > len(scratch):
		return 0, fmt.Errorf("UDP super-packet with %d-byte datagrams: larger than the %d-byte datagram buffer", seg, len(scratch)-hdrLen)
	}
	count(total)
	n := 0
	for off := 0; off < len(payload); off += seg {
		chunk := payload[off:min(off+seg, len(payload))]
		f := scratch[:hdrLen+len(chunk)]
		copy(f, frame[:hdrLen])
		copy(f[hdrLen:], chunk)
		d := f[linkHdr:] // the datagram, after the link header
		udpLen := uint16(header.UDPMinimumSize + len(chunk))
		if header.IPVersion(ip) == header.IPv4Version {
			v4 := header.IPv4(d)
			v4.SetTotalLength(uint16(len(d)))
			v4.SetID(id + uint16(n))
			v4.SetChecksum(0)
			v4.SetChecksum(^v4.CalculateChecksum())
		} else {
			header.IPv6(d).SetPayloadLength(uint16(len(d) - header.IPv6MinimumSize))
		}
		u := header.UDP(d[l4:])
		u.SetLength(udpLen)
		u.SetChecksum(0)
		xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, udpLen)
		sum := ^checksum.Checksum(d[l4:], xsum)
		if sum == 0 {
			sum = 0xffff // a computed UDP checksum of 0 is sent as all ones
		}
		binary.BigEndian.PutUint16(d[l4+udpChecksumOffset:], sum)
		emit(f)
		n++
	}
	return n, nil
}

// ipv6UDPOffset follows the IPv6 header chain of ip through the extension
// headers a UDP super-packet may carry (hop-by-hop, routing, destination
// options) and returns where UDP starts, or false if the chain ends
// elsewhere or runs past the packet.
func ipv6UDPOffset(ip []byte) (int, bool) {
	off, next := header.IPv6MinimumSize, header.IPv6(ip).NextHeader()
	for {
		switch next {
		case uint8(header.UDPProtocolNumber):
			return off, true
		case uint8(header.IPv6HopByHopOptionsExtHdrIdentifier), uint8(header.IPv6RoutingExtHdrIdentifier), uint8(header.IPv6DestinationOptionsExtHdrIdentifier):
			if off+2 > len(ip) {
				return 0, false
			}
			next, off = ip[off], off+8*(int(ip[off+1])+1)
		default:
			return 0, false
		}
	}
}

// udpChecksumOffset is where the checksum sits in a UDP header.
const udpChecksumOffset = 6
