package link

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// PacketFlowHash is FlowHash of an outgoing packet's network and transport
// headers: what a multi-queue endpoint picks a transmit queue by.
func PacketFlowHash(pkt *stack.PacketBuffer) uint32 {
	return FlowHash(pkt.NetworkHeader().Slice(), pkt.TransportHeader().Slice())
}

// FlowHash hashes what identifies the flow of an IPv4 or IPv6 packet whose
// network header is nh and transport header th: both addresses, the
// transport protocol and, for TCP and UDP, both ports. Fragments hash
// without ports (only the first fragment has them), so a fragmented
// datagram stays on one queue. Anything else (ARP, a truncated header)
// hashes to 0. The hash is deterministic: one flow always gets the same
// value, whatever its payload, in this process and the next.
//
// pkt.Hash cannot serve: gVisor sets it for TCP only, at random per
// connection, and leaves UDP, ICMP, ARP and RSTs at 0.
func FlowHash(nh, th []byte) uint32 {
	var (
		src, dst []byte
		proto    uint8
		ports    = true
	)
	switch header.IPVersion(nh) {
	case header.IPv4Version:
		if len(nh) < header.IPv4MinimumSize {
			return 0
		}
		h := header.IPv4(nh)
		src, dst, proto = nh[12:16], nh[16:20], h.Protocol()
		ports = !h.More() && h.FragmentOffset() == 0
	case header.IPv6Version:
		if len(nh) < header.IPv6MinimumSize {
			return 0
		}
		src, dst, proto = nh[8:24], nh[24:40], header.IPv6(nh).NextHeader()
		ports = proto != header.IPv6FragmentHeader
	default:
		return 0
	}
	h := uint32(fnvOffset)
	h = fnvAdd(h, src)
	h = fnvAdd(h, dst)
	h = (h ^ uint32(proto)) * fnvPrime
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber, header.UDPProtocolNumber:
		if ports && len(th) >= 4 {
			h = fnvAdd(h, th[:4])
		}
	}
	return fmix32(h)
}

// FNV-1a's 32-bit parameters.
const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

func fnvAdd(h uint32, b []byte) uint32 {
	for len(b) >= 4 {
		h = (h ^ binary.BigEndian.Uint32(b)) * fnvPrime
		b = b[4:]
	}
	for _, c := range b {
		h = (h ^ uint32(c)) * fnvPrime
	}
	return h
}

// fmix32 is MurmurHash3's finalizer: it spreads every input bit over the
// high bits that QueueIndex uses.
func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// QueueIndex maps a hash onto n queues by its high bits (Lemire's
// multiply-shift), without a division.
func QueueIndex(h uint32, n int) int {
	return int(uint64(h) * uint64(n) >> 32)
}

// NetworkProtocol is the network protocol of ip, an IP packet with no
// link header (what a TUN device or a VPN hands over), by its version:
// what such a link tells gVisor a packet is. ok is false for anything
// but IPv4 and IPv6, which the link counts as malformed.
func NetworkProtocol(ip []byte) (proto tcpip.NetworkProtocolNumber, ok bool) {
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		return header.IPv4ProtocolNumber, true
	case header.IPv6Version:
		return header.IPv6ProtocolNumber, true
	}
	return 0, false
}
