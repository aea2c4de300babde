package afpacket

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

const (
	// linkHdrLen is the Ethernet header in front of every frame.
	linkHdrLen = header.EthernetMinimumSize
	// maxIPPacket is the largest packet a received super-packet can be:
	// the kernel's GRO and a veth peer's TSO stop at 64 KiB (gso_max_size),
	// which is also the IPv4 total length limit.
	maxIPPacket = 1 << 16
	// rxBufSize is one landing buffer: a virtio-net header, an Ethernet
	// header and the largest packet.
	rxBufSize = vnet.HeaderSize + linkHdrLen + maxIPPacket

	// tcpChecksumOffset and udpChecksumOffset are where the checksum sits
	// in a TCP and a UDP header.
	tcpChecksumOffset = 16
	udpChecksumOffset = 6
)

// rxVerdict says what to do with one received frame, and which counter
// takes it if it is not delivered.
type rxVerdict uint8

const (
	// rxDeliver: hand the frame to the stack.
	rxDeliver rxVerdict = iota
	// rxError (RXErrors): the device handed over something unusable: a
	// bad virtio-net header, a frame shorter than an Ethernet header, or a
	// UDP super-packet, which gVisor would take for one datagram.
	rxError
	// rxMalformed (RXMalformed): not IPv4, IPv6 or ARP.
	rxMalformed
	// rxBadChecksum (RXBadChecksum): a checksum nobody vouched for is
	// wrong, or a partial checksum could not be completed.
	rxBadChecksum
)

// rxCheck says who checks the checksums of received frames.
type rxCheck uint8

const (
	// checkVnet: each frame comes behind a virtio-net header with the
	// kernel's verdict; the endpoint claims RX checksum offload and checks
	// what the kernel did not vouch for (vnet.Inspect).
	checkVnet rxCheck = iota
	// checkStack: no header, no claim: gVisor verifies every checksum.
	// Frames whose checksum PACKET_AUXDATA reports partial are completed
	// here, since gVisor would take them for wrong.
	checkStack
	// checkHere: no header, but the endpoint claims RX checksum offload
	// (GRO needs it: a merged segment's checksum no longer verifies), so
	// it verifies every frame itself (vnet.CheckIP), trusting the partial
	// ones, as it does behind the header.
	checkHere
)

// parseRX inspects one received buffer b: the frame, behind a virtio-net
// header with checkVnet. partialCsum says the kernel reported (through
// PACKET_AUXDATA, without the virtio-net header) that the frame's
// transport checksum is partial; with checkStack parseRX then completes it
// in place, so that gVisor accepts it. It returns the frame (Ethernet
// header first, a sub-slice of b), its EtherType, and the verdict; frame
// and proto mean something only with rxDeliver.
//
// Nothing in b can make parseRX index out of range: every length it uses
// is checked first (FuzzParseRX holds it to that).
func parseRX(b []byte, check rxCheck, partialCsum bool) (frame []byte, proto tcpip.NetworkProtocolNumber, v rxVerdict) {
	var h vnet.Header
	frame = b
	vnetHdr := check == checkVnet
	if vnetHdr {
		var err error
		if h, err = vnet.Decode(b); err != nil {
			return nil, 0, rxError
		}
		frame = b[vnet.HeaderSize:]
		if h.Check(len(frame)) != nil {
			return nil, 0, rxError
		}
		if h.IsGSO() {
			switch h.GSOType &^ vnet.GSOECN {
			case vnet.GSOTCPv4, vnet.GSOTCPv6:
			default:
				return nil, 0, rxError
			}
		}
	}
	if len(frame) < linkHdrLen {
		return nil, 0, rxError
	}
	proto = header.Ethernet(frame).Type()
	switch proto {
	case header.ARPProtocolNumber:
		return frame, proto, rxDeliver
	case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber:
	default:
		return nil, 0, rxMalformed
	}
	ip := frame[linkHdrLen:]
	verdict := vnet.Trusted
	switch {
	case vnetHdr:
		// The endpoint claims RX checksum offload, so gVisor checks
		// nothing: what the kernel did not vouch for is checked here.
		verdict = vnet.Inspect(h, ip)
	case check == checkHere && !partialCsum:
		verdict = vnet.CheckIP(ip)
	case check == checkStack && partialCsum:
		if !completePartial(ip) {
			return nil, 0, rxBadChecksum
		}
	}
	switch verdict {
	case vnet.Bad:
		return nil, 0, rxBadChecksum
	case vnet.Malformed:
		return nil, 0, rxMalformed
	}
	return frame, proto, rxDeliver
}

// trimPadding returns the Ethernet frame cut to its IP packet's own
// length (linkutil.TrimPadding): a frame shorter than Ethernet's minimum
// arrives padded.
func trimPadding(frame []byte, proto tcpip.NetworkProtocolNumber) []byte {
	return linkutil.TrimPadding(frame, linkHdrLen, proto)
}

// completePartial completes the partial transport checksum of the IP
// packet ip in place, as a device does for CHECKSUM_PARTIAL, and reports
// whether it could: it finds the checksum from the headers (an IPv4 header
// of any length, an IPv6 header without extension headers, then TCP or UDP),
// since PACKET_AUXDATA does not say where it is. Only the packet's own
// bytes are summed, never Ethernet padding after it. A partial checksum of
// a super-packet covers its full length (Linux fixes it up per segment
// when it segments), so completing it over the whole packet is right.
func completePartial(ip []byte) bool {
	var (
		proto uint8
		start int
	)
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		if len(ip) < header.IPv4MinimumSize {
			return false
		}
		h := header.IPv4(ip)
		hl, tl := int(h.HeaderLength()), int(h.TotalLength())
		if hl < header.IPv4MinimumSize || tl < hl || tl > len(ip) {
			return false
		}
		if h.More() || h.FragmentOffset() != 0 {
			return false // fragments never carry a partial checksum
		}
		proto, start, ip = h.Protocol(), hl, ip[:tl]
	case header.IPv6Version:
		if len(ip) < header.IPv6MinimumSize {
			return false
		}
		h := header.IPv6(ip)
		end := header.IPv6MinimumSize + int(h.PayloadLength())
		if end > len(ip) {
			return false
		}
		proto, start, ip = h.NextHeader(), header.IPv6MinimumSize, ip[:end]
	default:
		return false
	}
	var off uint16
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber:
		off = tcpChecksumOffset
		if len(ip)-start < header.TCPMinimumSize {
			return false
		}
	case header.UDPProtocolNumber:
		off = udpChecksumOffset
		if len(ip)-start < header.UDPMinimumSize {
			return false
		}
	default:
		return false
	}
	h := vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: uint16(start), CsumOffset: off}
	if h.Check(len(ip)) != nil {
		return false
	}
	vnet.Complete(h, ip)
	return true
}
