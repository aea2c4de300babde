// Package vnet reads and writes the virtio-net header that TUN (with
// IFF_VNET_HDR) and AF_PACKET (with PACKET_VNET_HDR) put in front of every
// packet, and does what the header asks of userspace: describe a gVisor
// GSO super-segment on the way out, and on the way in trust the kernel's
// checksum verdict or verify the packet ourselves.
//
// The header is struct virtio_net_hdr from linux/virtio_net.h, in the
// host's byte order as the legacy interface uses it (little-endian on
// every machine ustack runs on); gVisor's own header.VirtioNetHeader reads
// its fields big-endian, so ustack does not use it.
package vnet

import (
	"encoding/binary"
	"errors"
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// HeaderSize is the size of struct virtio_net_hdr. TUN can be told a
// larger size (TUNSETVNETHDRSZ); ustack always uses this one.
const HeaderSize = 10

// Flags of virtio_net_hdr.flags.
const (
	// FlagNeedsCsum: the transport checksum is partial (the pseudo-header
	// sum is in place); whoever sends it on must complete it from
	// CsumStart, storing at CsumStart+CsumOffset. Linux's CHECKSUM_PARTIAL.
	FlagNeedsCsum = 1
	// FlagDataValid: the kernel verified the checksum. Linux's
	// CHECKSUM_UNNECESSARY.
	FlagDataValid = 2
)

// GSO types of virtio_net_hdr.gso_type.
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3 // UFO, obsolete
	GSOTCPv6 = 4
	GSOUDPL4 = 5 // USO
	GSOECN   = 0x80
)

// Header is a decoded virtio_net_hdr.
type Header struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // bytes of headers (link, network, transport) before the payload
	GSOSize    uint16 // payload bytes per segment (the MSS)
	CsumStart  uint16 // where checksumming starts, from the start of the packet
	CsumOffset uint16 // where the checksum goes, from CsumStart
}

// ErrShort is returned for a buffer shorter than a header.
var ErrShort = errors.New("vnet: buffer shorter than a virtio-net header")

// Decode reads a header from the start of b.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShort
	}
	return Header{
		Flags:      b[0],
		GSOType:    b[1],
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}, nil
}

// Encode writes h into the first HeaderSize bytes of b, which must be
// that long.
func (h Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
}

// IsGSO reports whether the packet is a super-segment to be cut into
// GSOSize pieces.
func (h Header) IsGSO() bool { return h.GSOType&^GSOECN != GSONone }

// Check validates a received header against the packet of packetLen
// bytes that follows it, so that nothing a device hands us can make us
// index out of range: the checksum location must lie inside the packet
// and a GSO packet must say how big its segments are.
func (h Header) Check(packetLen int) error {
	if h.Flags&FlagNeedsCsum != 0 {
		if int(h.CsumStart)+int(h.CsumOffset)+2 > packetLen {
			return fmt.Errorf("vnet: checksum at %d+%d outside a %d-byte packet", h.CsumStart, h.CsumOffset, packetLen)
		}
	}
	if h.IsGSO() {
		switch h.GSOType &^ GSOECN {
		case GSOTCPv4, GSOTCPv6, GSOUDPL4, GSOUDP:
		default:
			return fmt.Errorf("vnet: unknown GSO type %#x", h.GSOType)
		}
		if h.GSOSize == 0 {
			return errors.New("vnet: GSO packet with a zero segment size")
		}
		if int(h.HdrLen) > packetLen {
			return fmt.Errorf("vnet: header length %d beyond a %d-byte packet", h.HdrLen, packetLen)
		}
	}
	return nil
}

// ForTX returns the header for an outgoing packet. linkHdrLen is the size
// of the link header in front of the network header (14 for Ethernet, 0
// for TUN). A gVisor host-GSO super-segment becomes a TSO request with a
// partial checksum for the kernel to complete per segment; anything else
// goes as it is (gVisor has computed its checksums).
func ForTX(pkt *stack.PacketBuffer, linkHdrLen int) Header {
	gso := pkt.GSOOptions
	var h Header
	if gso.NeedsCsum {
		h.Flags = FlagNeedsCsum
		h.CsumStart = uint16(linkHdrLen) + gso.L3HdrLen
		h.CsumOffset = gso.CsumOffset
	}
	switch gso.Type {
	case stack.GSOTCPv4, stack.GSOTCPv6:
		if gso.Type == stack.GSOTCPv4 {
			h.GSOType = GSOTCPv4
		} else {
			h.GSOType = GSOTCPv6
		}
		l4 := pkt.TransportHeader().Slice()
		tcpLen := header.TCPMinimumSize
		if len(l4) >= header.TCPMinimumSize {
			tcpLen = int(header.TCP(l4).DataOffset())
		}
		h.HdrLen = uint16(linkHdrLen) + gso.L3HdrLen + uint16(tcpLen)
		h.GSOSize = gso.MSS
		if pkt.Data().Size() <= int(gso.MSS) {
			// One segment's worth: no segmentation, only the checksum.
			h.GSOType, h.GSOSize, h.HdrLen = GSONone, 0, 0
		}
	}
	return h
}
