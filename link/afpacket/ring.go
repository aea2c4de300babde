package afpacket

import (
	"encoding/binary"

	"github.com/ustack-dev/ustack/link/vnet"
)

// The layout of a TPACKET_V3 receive block (linux/if_packet.h), as offsets
// into the block: a struct tpacket_block_desc whose header is a struct
// tpacket_hdr_v1, then the frames, each a struct tpacket3_hdr followed by a
// struct sockaddr_ll and, tp_mac bytes from the header's start, the frame
// (behind the virtio-net header, with PACKET_VNET_HDR).
const (
	blkStatus    = 8  // tpacket_hdr_v1.block_status
	blkNumPkts   = 12 // tpacket_hdr_v1.num_pkts
	blkFirstPkt  = 16 // tpacket_hdr_v1.offset_to_first_pkt
	blkLen       = 20 // tpacket_hdr_v1.blk_len
	blkDescLen   = 48 // the descriptor, as the kernel aligns it (BLK_HDR_LEN)
	tp3Next      = 0  // tpacket3_hdr.tp_next_offset
	tp3Snaplen   = 12 // tpacket3_hdr.tp_snaplen
	tp3Len       = 16 // tpacket3_hdr.tp_len
	tp3Status    = 20 // tpacket3_hdr.tp_status
	tp3Mac       = 24 // tpacket3_hdr.tp_mac
	tp3HdrLen    = 48 // TPACKET_ALIGN(sizeof(struct tpacket3_hdr))
	sllPkttype   = 10 // sockaddr_ll.sll_pkttype
	sllLen       = 20 // sizeof(struct sockaddr_ll)
	tpStatusUser = 1  // TP_STATUS_USER: the block is the reader's
	// tpStatusCsumNotReady is TP_STATUS_CSUMNOTREADY: the frame's
	// transport checksum is partial.
	tpStatusCsumNotReady = 8
)

// ringFrame is what a receive round does with one frame of a block: b is
// the frame as recvmmsg would have handed it over (behind the virtio-net
// header with vnetHdr), with its sll_pkttype, whether it was cut short and
// whether its checksum is partial. b is the kernel's block: it is valid
// only until the frame function returns.
type ringFrame func(b []byte, pt uint8, truncated, partial bool)

// walkBlock calls f for each frame of the TPACKET_V3 block blk, which the
// kernel has handed over, and returns how many frames it passed on and how
// many it found unusable (lengths or offsets outside the block: they and
// the rest of the block are skipped). Nothing in blk can make walkBlock
// index out of range (FuzzWalkBlock holds it to that).
func walkBlock(blk []byte, vnetHdr bool, f ringFrame) (frames, bad int) {
	if len(blk) < blkDescLen {
		return 0, 1
	}
	ne := binary.NativeEndian
	n := int(ne.Uint32(blk[blkNumPkts:]))
	end := min(int(ne.Uint32(blk[blkLen:])), len(blk))
	off := int(ne.Uint32(blk[blkFirstPkt:]))
	vh := 0
	if vnetHdr {
		vh = vnet.HeaderSize
	}
	for i := range n {
		if off < blkDescLen || off > end-(tp3HdrLen+sllLen) {
			return frames, n - i
		}
		h := blk[off:]
		snap := int(ne.Uint32(h[tp3Snaplen:]))
		start := off + int(ne.Uint16(h[tp3Mac:]))
		if start-vh < off+tp3HdrLen+sllLen || snap > end-start {
			return frames, n - i
		}
		status := ne.Uint32(h[tp3Status:])
		f(blk[start-vh:start+snap], h[tp3HdrLen+sllPkttype], snap < int(ne.Uint32(h[tp3Len:])), status&tpStatusCsumNotReady != 0)
		frames++
		next := int(ne.Uint32(h[tp3Next:]))
		if next == 0 {
			if i < n-1 {
				return frames, n - 1 - i
			}
			break
		}
		off += next
	}
	return frames, 0
}

// The layout of a TPACKET_V2 receive slot (linux/if_packet.h), as offsets
// into the slot: a struct tpacket2_hdr, a struct sockaddr_ll and, tp_mac
// bytes from the slot's start, the frame (behind the virtio-net header,
// with PACKET_VNET_HDR).
const (
	tp2Status  = 0  // tpacket2_hdr.tp_status
	tp2Len     = 4  // tpacket2_hdr.tp_len
	tp2Snaplen = 8  // tpacket2_hdr.tp_snaplen
	tp2Mac     = 12 // tpacket2_hdr.tp_mac
	tp2HdrLen  = 32 // TPACKET_ALIGN(sizeof(struct tpacket2_hdr))
	// tpStatusCopy is TP_STATUS_COPY: the frame did not fit its slot,
	// which holds only its start; the kernel queued the whole frame on
	// the socket (PACKET_COPY_THRESH), to be read with recvmsg.
	tpStatusCopy = 2
)

// slotFrame is one TPACKET_V2 slot, as parseSlot reads it.
type slotFrame struct {
	b         []byte // the frame, as recvmmsg would have handed it over
	pt        uint8  // sll_pkttype
	truncated bool   // cut short: tp_snaplen < tp_len
	partial   bool   // TP_STATUS_CSUMNOTREADY
	copied    bool   // TP_STATUS_COPY: b is only the start; read the frame from the socket
}

// parseSlot reads the TPACKET_V2 slot s, which the kernel has handed over
// with the status word status, and reports false if its lengths or offsets
// point outside it. The frame is behind the virtio-net header with
// vnetHdr. b is the slot's memory: valid until the slot is handed back.
// A copied frame's slot may hold no bytes of it at all (the kernel skips
// the virtio-net header when not even that fits): only pt is read from
// it. Nothing in s can make parseSlot index out of range (FuzzParseSlot
// holds it to that).
func parseSlot(s []byte, status uint32, vnetHdr bool) (slotFrame, bool) {
	if len(s) < tp2HdrLen+sllLen {
		return slotFrame{}, false
	}
	f := slotFrame{
		pt:      s[tp2HdrLen+sllPkttype],
		partial: status&tpStatusCsumNotReady != 0,
		copied:  status&tpStatusCopy != 0,
	}
	if f.copied {
		return f, true
	}
	ne := binary.NativeEndian
	vh := 0
	if vnetHdr {
		vh = vnet.HeaderSize
	}
	start := int(ne.Uint16(s[tp2Mac:]))
	snap := int(ne.Uint32(s[tp2Snaplen:]))
	if start-vh < tp2HdrLen+sllLen || start > len(s) || snap < 0 || snap > len(s)-start {
		return slotFrame{}, false
	}
	f.b = s[start-vh : start+snap]
	f.truncated = snap < int(ne.Uint32(s[tp2Len:]))
	return f, true
}
