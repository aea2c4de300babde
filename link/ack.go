package link

import "gvisor.dev/gvisor/pkg/tcpip/header"

// IsPureACK reports whether a TCP segment is an ACK alone: the ACK flag
// and no other, no payload, and no option but timestamps (each with its
// proper length byte) and padding (NOP, EOL). tcp holds the segment from
// its first byte, at least its whole header (options included); segLen
// is the segment's length, header and payload. Anything cut short or
// malformed is not a pure ACK.
//
// It is the one definition of what may be held back or dropped because a
// later segment repeats it: the delayed ACK of package stack holds pure
// ACKs until an answer carries them, and receive offload (GRO) thins a
// round's pure ACKs of one flow to the last. An ACK with SACK blocks, a
// DSACK, ECN flags, a window probe's byte or an option we do not know
// carries news that a later ACK does not repeat, so it is never pure.
func IsPureACK(tcp []byte, segLen int) bool {
	if len(tcp) < header.TCPMinimumSize {
		return false
	}
	t := header.TCP(tcp)
	off := int(t.DataOffset())
	if t.Flags() != header.TCPFlagAck || off != segLen || off < header.TCPMinimumSize || off > len(tcp) {
		return false
	}
	for opts := tcp[header.TCPMinimumSize:off]; len(opts) > 0; {
		switch opts[0] {
		case header.TCPOptionEOL:
			return true
		case header.TCPOptionNOP:
			opts = opts[1:]
		case header.TCPOptionTS:
			if len(opts) < header.TCPOptionTSLength || opts[1] != header.TCPOptionTSLength {
				return false
			}
			opts = opts[header.TCPOptionTSLength:]
		default:
			return false
		}
	}
	return true
}
