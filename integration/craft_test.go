//go:build linux

package integration

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/netns"
)

// This file crafts IP packets, well-formed or deliberately not, and sends
// them from the kernel's side of a link, below the kernel's own stack, so
// that they reach ustack exactly as written.

// csum is the Internet checksum of b, folded, not complemented, added to
// the partial sum.
func csum(partial uint32, b []byte) uint32 {
	for len(b) >= 2 {
		partial += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		partial += uint32(b[0]) << 8
	}
	for partial>>16 != 0 {
		partial = partial&0xffff + partial>>16
	}
	return partial
}

// pseudo is the partial checksum of the TCP/UDP pseudo-header.
func pseudo(src, dst netip.Addr, proto byte, length int) uint32 {
	s := csum(0, src.AsSlice())
	s = csum(s, dst.AsSlice())
	return csum(s, []byte{0, proto, byte(length >> 8), byte(length)})
}

// l4 finishes a TCP or UDP header in seg (checksum at off) for src->dst.
func l4(seg []byte, src, dst netip.Addr, proto byte, off int) []byte {
	seg[off], seg[off+1] = 0, 0
	c := ^uint16(csum(pseudo(src, dst, proto, len(seg)), seg))
	if c == 0 && proto == unix.IPPROTO_UDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[off:], c)
	return seg
}

// tcpSeg builds a TCP segment with a correct checksum.
func tcpSeg(src, dst netip.Addr, sport, dport uint16, seq, ack uint32, flags byte, win uint16, payload []byte) []byte {
	seg := make([]byte, 20+len(payload))
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint32(seg[4:], seq)
	binary.BigEndian.PutUint32(seg[8:], ack)
	seg[12] = 5 << 4
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], win)
	copy(seg[20:], payload)
	return l4(seg, src, dst, unix.IPPROTO_TCP, 16)
}

// udpDgram builds a UDP datagram with a correct checksum.
func udpDgram(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	seg := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
	copy(seg[8:], payload)
	return l4(seg, src, dst, unix.IPPROTO_UDP, 6)
}

// ip4 is an IPv4 header's fields; bytes lays it out with correct lengths
// and checksum in front of payload.
type ip4 struct {
	src, dst netip.Addr
	proto    byte
	id       uint16
	mf       bool
	fragOff  int // in bytes, a multiple of 8
	ttl      byte
	options  []byte // padded by the caller to a multiple of 4
}

func (h ip4) bytes(payload []byte) []byte {
	hl := 20 + len(h.options)
	b := make([]byte, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], h.id)
	ff := uint16(h.fragOff / 8)
	if h.mf {
		ff |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], ff)
	b[8] = h.ttl
	if b[8] == 0 {
		b[8] = 64
	}
	b[9] = h.proto
	copy(b[12:], h.src.AsSlice())
	copy(b[16:], h.dst.AsSlice())
	copy(b[20:], h.options)
	copy(b[hl:], payload)
	binary.BigEndian.PutUint16(b[10:], ^uint16(csum(0, b[:hl])))
	return b
}

// ip6 lays out an IPv6 header with next header nh in front of payload.
func ip6(src, dst netip.Addr, nh byte, payload []byte) []byte {
	b := make([]byte, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = nh
	b[7] = 64
	copy(b[8:], src.AsSlice())
	copy(b[24:], dst.AsSlice())
	copy(b[40:], payload)
	return b
}

// fixIP4Checksum recomputes the header checksum after an edit.
func fixIP4Checksum(b []byte) {
	hl := int(b[0]&0xf) * 4
	if hl < 20 || hl > len(b) {
		return
	}
	b[10], b[11] = 0, 0
	binary.BigEndian.PutUint16(b[10:], ^uint16(csum(0, b[:hl])))
}

// rawSender sends IP packets out of an interface in a namespace through a
// SOCK_DGRAM packet socket: the kernel adds the link header (to dst on an
// Ethernet link) and nothing else, so the packet arrives as written.
type rawSender struct {
	fd      int
	ifindex int
	dst     net.HardwareAddr
	sent    int
}

func newRawSender(tb testing.TB, k *netns.NS, ifname string, dst net.HardwareAddr) *rawSender {
	tb.Helper()
	r := &rawSender{fd: -1, dst: dst}
	err := k.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		r.ifindex = ifi.Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		r.fd = fd
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(r.fd) })
	return r
}

// openRawSender is a rawSender out of ifname, a device with no link
// header (TUN) in this process's namespace: a program inside a sandbox
// crafts packets with it. Close it with close.
func openRawSender(ifname string) (*rawSender, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	return &rawSender{fd: fd, ifindex: ifi.Index}, nil
}

func (r *rawSender) close() { unix.Close(r.fd) }

// send sends one IP packet, IPv6 if its first nibble says so (a packet too
// short to say goes as IPv4).
func (r *rawSender) send(pkt []byte) error {
	proto := uint16(unix.ETH_P_IP)
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		proto = unix.ETH_P_IPV6
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: r.ifindex}
	if r.dst != nil {
		sa.Halen = uint8(len(r.dst))
		copy(sa.Addr[:], r.dst)
	}
	for {
		err := unix.Sendto(r.fd, pkt, 0, sa)
		if err == unix.ENOBUFS || err == unix.EAGAIN {
			continue // the device queue is full: wait for it, lose nothing
		}
		if err != nil {
			return fmt.Errorf("send a %d-byte crafted packet: %w", len(pkt), err)
		}
		r.sent++
		return nil
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
