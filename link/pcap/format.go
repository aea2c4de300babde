package pcap

import (
	"encoding/binary"
	"time"
)

// The link types of a capture file's header (tcpdump.org's list of
// LINKTYPE_ values, which a file carries instead of the platform's DLT_).
const (
	// LinkTypeEthernet is LINKTYPE_ETHERNET: every packet starts with an
	// Ethernet header.
	LinkTypeEthernet = 1
	// LinkTypeRaw is LINKTYPE_RAW: every packet is an IPv4 or IPv6 packet,
	// its version in the first nibble.
	LinkTypeRaw = 101
)

// The libpcap file format: a 24-byte file header, then per packet a
// 16-byte record header and the captured bytes. Written in little-endian
// order; readers tell the order from the magic.
const (
	// magicNanos marks a file whose record timestamps count nanoseconds
	// (libpcap 1.5 and later, and Wireshark, read it; the older
	// 0xa1b2c3d4 counts microseconds, too coarse for packets that a
	// userspace stack handles a few hundred nanoseconds apart).
	magicNanos      = 0xa1b23c4d
	versionMajor    = 2
	versionMinor    = 4
	fileHeaderLen   = 24
	recordHeaderLen = 16
)

// fileHeader returns the file header of a capture with the given snap
// length and link type.
func fileHeader(snapLen int, linkType uint32) []byte {
	b := make([]byte, 0, fileHeaderLen)
	b = binary.LittleEndian.AppendUint32(b, magicNanos)
	b = binary.LittleEndian.AppendUint16(b, versionMajor)
	b = binary.LittleEndian.AppendUint16(b, versionMinor)
	b = binary.LittleEndian.AppendUint32(b, 0) // thiszone: timestamps are UTC
	b = binary.LittleEndian.AppendUint32(b, 0) // sigfigs: always 0
	b = binary.LittleEndian.AppendUint32(b, uint32(snapLen))
	return binary.LittleEndian.AppendUint32(b, linkType)
}

// appendRecordHeader appends the record header of a packet of length orig
// captured at ts, of which incl bytes follow.
func appendRecordHeader(b []byte, ts time.Time, incl, orig int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(ts.Unix()))
	b = binary.LittleEndian.AppendUint32(b, uint32(ts.Nanosecond()))
	b = binary.LittleEndian.AppendUint32(b, uint32(incl))
	return binary.LittleEndian.AppendUint32(b, uint32(orig))
}
