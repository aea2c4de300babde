package afpacket

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/vnet"
)

var (
	macA = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x0a")
	macB = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x0b")
	src4 = tcpip.AddrFrom4([4]byte{198, 18, 10, 1})
	dst4 = tcpip.AddrFrom4([4]byte{198, 18, 10, 2})
	src6 = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 15: 1})
	dst6 = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 15: 2})
)

// ip4 builds an IPv4 packet carrying a TCP or UDP header and payload, with
// a full transport checksum, or the pseudo-header sum only (partial), or a
// wrong one (bad).
func ip4(proto tcpip.TransportProtocolNumber, sport, dport uint16, payload []byte, csum string) []byte {
	thl := header.TCPMinimumSize
	if proto == header.UDPProtocolNumber {
		thl = header.UDPMinimumSize
	}
	b := make([]byte, header.IPv4MinimumSize+thl+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(proto), SrcAddr: src4, DstAddr: dst4})
	ip.SetChecksum(^ip.CalculateChecksum())
	setTransport(b[header.IPv4MinimumSize:], proto, sport, dport, payload, src4, dst4, csum)
	return b
}

func ip6(proto tcpip.TransportProtocolNumber, sport, dport uint16, payload []byte, csum string) []byte {
	thl := header.TCPMinimumSize
	if proto == header.UDPProtocolNumber {
		thl = header.UDPMinimumSize
	}
	b := make([]byte, header.IPv6MinimumSize+thl+len(payload))
	header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(thl + len(payload)), TransportProtocol: proto, HopLimit: 64, SrcAddr: src6, DstAddr: dst6})
	setTransport(b[header.IPv6MinimumSize:], proto, sport, dport, payload, src6, dst6, csum)
	return b
}

func setTransport(t []byte, proto tcpip.TransportProtocolNumber, sport, dport uint16, payload []byte, src, dst tcpip.Address, csum string) {
	off := tcpChecksumOffset
	if proto == header.UDPProtocolNumber {
		header.UDP(t).Encode(&header.UDPFields{SrcPort: sport, DstPort: dport, Length: uint16(len(t))})
		copy(t[header.UDPMinimumSize:], payload)
		off = udpChecksumOffset
	} else {
		header.TCP(t).Encode(&header.TCPFields{SrcPort: sport, DstPort: dport, SeqNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 1000})
		copy(t[header.TCPMinimumSize:], payload)
	}
	xsum := header.PseudoHeaderChecksum(proto, src, dst, uint16(len(t)))
	switch csum {
	case "partial":
		binary.BigEndian.PutUint16(t[off:], xsum)
	case "bad":
		binary.BigEndian.PutUint16(t[off:], ^checksum.Checksum(t, xsum)+1)
	default:
		binary.BigEndian.PutUint16(t[off:], ^checksum.Checksum(t, xsum))
	}
}

// frame puts an Ethernet header in front of an IP packet or ARP body.
func frame(proto tcpip.NetworkProtocolNumber, body []byte) []byte {
	b := make([]byte, linkHdrLen+len(body))
	header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: macA, DstAddr: macB, Type: proto})
	copy(b[linkHdrLen:], body)
	return b
}

// withVnet puts a virtio-net header in front of a frame.
func withVnet(h vnet.Header, f []byte) []byte {
	b := make([]byte, vnet.HeaderSize+len(f))
	h.Encode(b)
	copy(b[vnet.HeaderSize:], f)
	return b
}

func TestParseRX(t *testing.T) {
	payload := []byte("afpacket test payload")
	good4 := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, payload, "full"))
	bad4 := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, payload, "bad"))
	partial4 := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, payload, "partial"))
	partial6 := frame(header.IPv6ProtocolNumber, ip6(header.UDPProtocolNumber, 1, 2, payload, "partial"))
	arp := frame(header.ARPProtocolNumber, make([]byte, header.ARPSize))
	vlan := frame(0x8100, make([]byte, 40))
	needsCsum := vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: linkHdrLen + header.IPv4MinimumSize, CsumOffset: tcpChecksumOffset}
	for _, tc := range []struct {
		name    string
		b       []byte
		check   rxCheck
		partial bool
		want    rxVerdict
		proto   tcpip.NetworkProtocolNumber
	}{
		{"vnet/verified", withVnet(vnet.Header{}, good4), checkVnet, false, rxDeliver, header.IPv4ProtocolNumber},
		{"vnet/bad checksum", withVnet(vnet.Header{}, bad4), checkVnet, false, rxBadChecksum, 0},
		{"vnet/trusted partial", withVnet(needsCsum, partial4), checkVnet, false, rxDeliver, header.IPv4ProtocolNumber},
		{"vnet/trusted valid", withVnet(vnet.Header{Flags: vnet.FlagDataValid}, bad4), checkVnet, false, rxDeliver, header.IPv4ProtocolNumber},
		{"vnet/gso tcp", withVnet(vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4 | vnet.GSOECN, GSOSize: 8, HdrLen: 54, CsumStart: 34, CsumOffset: 16}, partial4), checkVnet, false, rxDeliver, header.IPv4ProtocolNumber},
		{"vnet/gso udp", withVnet(vnet.Header{GSOType: vnet.GSOUDPL4, GSOSize: 8, HdrLen: 42}, partial6), checkVnet, false, rxError, 0},
		{"vnet/checksum outside", withVnet(vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 1000}, good4), checkVnet, false, rxError, 0},
		{"vnet/short header", good4[:vnet.HeaderSize-1], checkVnet, false, rxError, 0},
		{"vnet/arp", withVnet(vnet.Header{}, arp), checkVnet, false, rxDeliver, header.ARPProtocolNumber},
		{"vnet/vlan", withVnet(vnet.Header{}, vlan), checkVnet, false, rxMalformed, 0},
		{"vnet/runt", withVnet(vnet.Header{}, good4[:10]), checkVnet, false, rxError, 0},
		{"plain/good", good4, checkStack, false, rxDeliver, header.IPv4ProtocolNumber},
		{"plain/bad is gVisor's to find", bad4, checkStack, false, rxDeliver, header.IPv4ProtocolNumber},
		{"plain/partial4 completed", partial4, checkStack, true, rxDeliver, header.IPv4ProtocolNumber},
		{"plain/partial6 completed", partial6, checkStack, true, rxDeliver, header.IPv6ProtocolNumber},
		{"plain/partial fragment", frame(header.IPv4ProtocolNumber, fragment(ip4(header.UDPProtocolNumber, 1, 2, payload, "partial"))), checkStack, true, rxBadChecksum, 0},
		{"plain/runt", good4[:13], checkStack, false, rxError, 0},
		{"here/good", good4, checkHere, false, rxDeliver, header.IPv4ProtocolNumber},
		{"here/bad", bad4, checkHere, false, rxBadChecksum, 0},
		{"here/partial trusted", partial4, checkHere, true, rxDeliver, header.IPv4ProtocolNumber},
		{"here/runt", good4[:13], checkHere, false, rxError, 0},
		{"here/cut short", good4[:len(good4)-1], checkHere, false, rxMalformed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), tc.b...)
			f, proto, v := parseRX(b, tc.check, tc.partial)
			require.Equal(t, tc.want, v)
			if v != rxDeliver {
				return
			}
			require.Equal(t, tc.proto, proto)
			off := 0
			if tc.check == checkVnet {
				off = vnet.HeaderSize
			}
			require.Equal(t, len(b)-off, len(f))
			if tc.partial && tc.check == checkStack {
				require.True(t, vnet.VerifyIP(f[linkHdrLen:]), "completed checksum verifies")
			}
		})
	}
}

// fragment marks an IPv4 packet as a first fragment.
func fragment(b []byte) []byte {
	ip := header.IPv4(b)
	ip.SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	return b
}

func TestCompletePartialIgnoresPadding(t *testing.T) {
	// A 60-byte minimum Ethernet frame pads a small UDP packet; the
	// padding must not enter the checksum.
	p := ip4(header.UDPProtocolNumber, 53, 5353, []byte{1}, "partial")
	padded := append(append([]byte(nil), p...), 0xde, 0xad, 0xbe, 0xef)
	require.True(t, completePartial(padded))
	require.True(t, vnet.VerifyIP(padded[:len(p)]))
	require.Equal(t, ip4(header.UDPProtocolNumber, 53, 5353, []byte{1}, "full"), padded[:len(p)])
}

func TestFlowHashStable(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(sport uint16, payload []byte) []byte
		nhl  int
	}{
		{"tcp4", func(s uint16, p []byte) []byte { return ip4(header.TCPProtocolNumber, s, 80, p, "full") }, header.IPv4MinimumSize},
		{"udp6", func(s uint16, p []byte) []byte { return ip6(header.UDPProtocolNumber, s, 53, p, "full") }, header.IPv6MinimumSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.mk(1000, []byte("one"))
			b := tc.mk(1000, []byte("another payload entirely"))
			c := tc.mk(1001, []byte("one"))
			ha := link.FlowHash(a[:tc.nhl], a[tc.nhl:])
			require.Equal(t, ha, link.FlowHash(b[:tc.nhl], b[tc.nhl:]), "same flow, other payload")
			require.Equal(t, ha, link.FlowHash(a[:tc.nhl], a[tc.nhl:]), "same packet again")
			require.NotEqual(t, ha, link.FlowHash(c[:tc.nhl], c[tc.nhl:]), "other source port")
		})
	}
	require.Zero(t, link.FlowHash(make([]byte, header.ARPSize), nil), "ARP")
	require.Zero(t, link.FlowHash(nil, nil))
	// The first fragment carries ports and later ones none: both must hash
	// alike, so a datagram's fragments share a queue.
	first := fragment(ip4(header.UDPProtocolNumber, 7, 9, []byte("x"), "full"))
	later := ip4(header.UDPProtocolNumber, 8, 10, []byte("x"), "full")
	header.IPv4(later).SetFlagsFragmentOffset(0, 8)
	require.Equal(t, link.FlowHash(first[:20], first[20:]), link.FlowHash(later[:20], nil))
}

func TestFlowHashSpreads(t *testing.T) {
	const flows = 8192
	rng := rand.New(rand.NewPCG(1, 2))
	for _, queues := range []int{2, 3, 4, 8} {
		counts := make([]int, queues)
		for range flows {
			p := ip4(header.TCPProtocolNumber, uint16(rng.IntN(1<<16)), uint16(rng.IntN(1<<16)), nil, "full")
			counts[link.QueueIndex(link.FlowHash(p[:20], p[20:]), queues)]++
		}
		for q, n := range counts {
			share := float64(n) / flows * float64(queues)
			require.InDelta(t, 1, share, 0.15, "queues=%d: queue %d got %d of %d flows", queues, q, n, flows)
		}
	}
	// Flows that differ only in one port bit still spread.
	counts := make([]int, 4)
	for port := range uint16(64) {
		p := ip6(header.UDPProtocolNumber, 40000+port, 53, nil, "full")
		counts[link.QueueIndex(link.FlowHash(p[:40], p[40:]), 4)]++
	}
	for q, n := range counts {
		require.Greater(t, n, 4, "queue %d of 4 got %d of 64 sequential ports", q, n)
	}
}

func TestQueueIndexRange(t *testing.T) {
	for _, h := range []uint32{0, 1, 1 << 31, ^uint32(0)} {
		for _, n := range []int{1, 2, 7, MaxQueues} {
			i := link.QueueIndex(h, n)
			require.True(t, i >= 0 && i < n, "link.QueueIndex(%#x, %d) = %d", h, n, i)
		}
	}
}

// FuzzParseRX feeds arbitrary buffers to the receive parser: it must never
// panic, a delivered frame must lie within the buffer and start with an
// Ethernet header of the type returned, and the only bytes it may change
// are one transport checksum (two adjacent bytes, when it completes a
// partial checksum). That a completed checksum verifies is TestParseRX's
// to show: it holds only when the field held the pseudo-header sum.
func FuzzParseRX(f *testing.F) {
	payload := []byte("seed")
	for _, b := range [][]byte{
		frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, payload, "full")),
		frame(header.IPv4ProtocolNumber, ip4(header.UDPProtocolNumber, 1, 2, payload, "partial")),
		frame(header.IPv6ProtocolNumber, ip6(header.TCPProtocolNumber, 1, 2, payload, "partial")),
		frame(header.ARPProtocolNumber, make([]byte, header.ARPSize)),
	} {
		f.Add(b, false, true)
		f.Add(withVnet(vnet.Header{}, b), true, false)
		f.Add(withVnet(vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}, b), true, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, vnetHdr, partial bool) {
		orig := append([]byte(nil), b...)
		check := checkStack
		switch {
		case vnetHdr:
			check = checkVnet
		case len(b) > 0 && b[len(b)-1]&1 != 0:
			// The last byte picks the plain mode, so as not to change
			// the fuzz signature (and its corpus).
			check = checkHere
		}
		fr, proto, v := parseRX(b, check, partial)
		first, last := -1, -1
		for i := range b {
			if b[i] != orig[i] {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if first >= 0 && (!partial || check != checkStack || v != rxDeliver || last-first > 1) {
			t.Fatalf("bytes %d..%d changed (partial %v, check %d, verdict %d)", first, last, partial, check, v)
		}
		if v != rxDeliver {
			return
		}
		if len(fr) < linkHdrLen || len(fr) > len(b) || &fr[len(fr)-1] != &b[len(b)-1] {
			t.Fatalf("frame of %d bytes is not the tail of the %d-byte buffer", len(fr), len(b))
		}
		if got := header.Ethernet(fr).Type(); got != proto {
			t.Fatalf("protocol %d, EtherType %d", proto, got)
		}
		if tr := trimPadding(fr, proto); len(tr) < linkHdrLen || &tr[0] != &fr[0] {
			t.Fatalf("trimPadding cut the %d-byte frame to %d bytes", len(fr), len(tr))
		}
	})
}

// TestTrimPadding: a padded minimum frame is cut to its IP packet; a
// frame whose lengths do not add up is left whole.
func TestTrimPadding(t *testing.T) {
	pkt := ip4(header.TCPProtocolNumber, 1, 2, nil, "full")
	padded := frame(header.IPv4ProtocolNumber, append(bytes.Clone(pkt), make([]byte, 6)...))
	require.Len(t, trimPadding(padded, header.IPv4ProtocolNumber), linkHdrLen+len(pkt))
	exact := frame(header.IPv4ProtocolNumber, pkt)
	require.Len(t, trimPadding(exact, header.IPv4ProtocolNumber), len(exact))
	short := exact[:len(exact)-1]
	require.Len(t, trimPadding(short, header.IPv4ProtocolNumber), len(short), "lengths that do not add up")
	arp := frame(header.ARPProtocolNumber, make([]byte, header.ARPSize+10))
	require.Len(t, trimPadding(arp, header.ARPProtocolNumber), len(arp), "only IP is trimmed")
}
