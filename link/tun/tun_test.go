package tun

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/vnet"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	src4 = tcpip.AddrFrom4([4]byte{198, 18, 20, 1})
	dst4 = tcpip.AddrFrom4([4]byte{198, 18, 20, 2})
	src6 = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0x20, 15: 1})
	dst6 = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0x20, 15: 2})
)

func TestTunOptionsNormalize(t *testing.T) {
	got, err := (*Options)(nil).normalize()
	require.NoError(t, err)
	require.Equal(t, DefaultOptions(), got)

	got, err = (&Options{}).normalize()
	require.NoError(t, err)
	require.Equal(t, 1, got.Queues)
	require.Equal(t, uint32(DefaultMTU), got.MTU)
	require.Equal(t, DefaultRXBatch, got.RXBatch)

	addrs := []netip.Prefix{netip.MustParsePrefix("198.18.20.1/24")}
	got, err = (&Options{Addrs: addrs, MTU: MaxMTU, Queues: 4}).normalize()
	require.NoError(t, err)
	require.Equal(t, addrs, got.Addrs)
	addrs[0] = netip.Prefix{}
	require.True(t, got.Addrs[0].IsValid(), "normalize copies Addrs")

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"negative queues", Options{Queues: -1}, "queues"},
		{"too many queues", Options{Queues: MaxQueues + 1}, "queues"},
		{"small MTU", Options{MTU: 576}, "MTU 576"},
		{"large MTU", Options{MTU: 65535}, "MTU 65535"},
		{"negative batch", Options{RXBatch: -3}, "RX batch"},
		{"huge batch", Options{RXBatch: MaxRXBatch + 1}, "RX batch"},
		{"invalid prefix", Options{Addrs: []netip.Prefix{{}}}, "not a valid CIDR prefix"},
		{"mapped", Options{Addrs: []netip.Prefix{netip.MustParsePrefix("::ffff:198.18.20.1/120")}}, "IPv4-mapped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.normalize()
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestTunOptionsTAP: a TAP device's MAC is checked, or made random,
// unicast and locally administered; a TUN device takes none; NoConfigure
// takes no addresses, and leaves a zero MTU for Create to read.
func TestTunOptionsTAP(t *testing.T) {
	seen := map[string]bool{}
	for range 8 {
		o, err := (&Options{TAP: true}).normalize()
		require.NoError(t, err)
		require.Len(t, o.MAC, 6)
		require.Equal(t, byte(0x02), o.MAC[0]&0x03, "locally administered, unicast: % x", o.MAC)
		seen[o.MAC.String()] = true
	}
	require.Greater(t, len(seen), 1, "random")

	mac := net.HardwareAddr{0x52, 0x55, 0x0a, 0x00, 0x02, 0x02}
	o, err := (&Options{TAP: true, MAC: mac}).normalize()
	require.NoError(t, err)
	require.Equal(t, mac, o.MAC)
	mac[5] = 9
	require.Equal(t, byte(2), o.MAC[5], "normalize copies MAC")

	o, err = (&Options{NoConfigure: true}).normalize()
	require.NoError(t, err)
	require.Zero(t, o.MTU, "the device's MTU, read by Create")
	o, err = (&Options{NoConfigure: true, MTU: 9000}).normalize()
	require.NoError(t, err)
	require.Equal(t, uint32(9000), o.MTU)

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"MAC on TUN", Options{MAC: mac}, "a TUN device carries IP packets and has no link address"},
		{"short MAC", Options{TAP: true, MAC: mac[:4]}, "not an Ethernet address"},
		{"multicast MAC", Options{TAP: true, MAC: net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}}, "multicast"},
		{"broadcast MAC", Options{TAP: true, MAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, "multicast (or broadcast)"},
		{"zero MAC", Options{TAP: true, MAC: make(net.HardwareAddr, 6)}, "the unspecified address"},
		{"addresses without configuring", Options{NoConfigure: true, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.20.1/24")}}, "with NoConfigure: the device's creator configures it"},
		{"small MTU without configuring", Options{NoConfigure: true, MTU: 576}, "MTU 576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.normalize()
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestTunCheckName(t *testing.T) {
	for _, ok := range []string{"", "tun0", "ustun-0", "abcdefghijklmno"} {
		require.NoError(t, checkName(ok), ok)
	}
	for _, bad := range []string{"abcdefghijklmnop", "a/b", "a b", "a:b", ".", "..", "a\x00"} {
		require.Error(t, checkName(bad), "%q", bad)
	}
}

func TestTunOffloadsString(t *testing.T) {
	require.Equal(t, "none", Offloads{}.String())
	full := Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true, USO4: true, USO6: true}
	require.Equal(t, "vnet,csum,tso4,tso6,uso4,uso6", full.String())
	require.True(t, full.TSO())
	require.False(t, Offloads{TSO4: true}.TSO(), "host GSO needs both IP versions")
}

// ipv4 builds an IPv4 header with the given transport protocol, total
// length, ID and TTL, followed by the transport header l4.
func ipv4(src, dst tcpip.Address, proto tcpip.TransportProtocolNumber, l4 []byte, totalLen, id uint16, ttl uint8) []byte {
	b := make([]byte, header.IPv4MinimumSize+len(l4))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: totalLen, ID: id, TTL: ttl, Protocol: uint8(proto), SrcAddr: src, DstAddr: dst})
	copy(b[header.IPv4MinimumSize:], l4)
	return b
}

func ports(src, dst uint16) []byte {
	return []byte{byte(src >> 8), byte(src), byte(dst >> 8), byte(dst), 0, 0, 0, 0}
}

func TestTunFlowHashStable(t *testing.T) {
	// Every packet of a flow hashes alike, whatever its length, ID or TTL.
	l4 := ports(40000, 80)
	want := link.FlowHash(ipv4(src4, dst4, header.TCPProtocolNumber, l4, 60, 1, 64), l4)
	for i := range 100 {
		ip := ipv4(src4, dst4, header.TCPProtocolNumber, l4, uint16(60+i*13), uint16(i*7919), uint8(1+i))
		require.Equal(t, want, link.FlowHash(ip, l4))
	}
	require.Equal(t, want, link.FlowHash(ipv4(src4, dst4, header.TCPProtocolNumber, l4, 60, 1, 64), l4), "same input, same hash, every time")

	// Other flows differ.
	require.NotEqual(t, want, link.FlowHash(ipv4(src4, dst4, header.TCPProtocolNumber, ports(40001, 80), 60, 1, 64), ports(40001, 80)))
	require.NotEqual(t, want, link.FlowHash(ipv4(src4, dst4, header.UDPProtocolNumber, l4, 60, 1, 64), l4))
	require.NotEqual(t, want, link.FlowHash(ipv4(dst4, src4, header.TCPProtocolNumber, l4, 60, 1, 64), l4))

	// IPv4 fragments of one datagram hash alike, ports or not.
	frag := ipv4(src4, dst4, header.UDPProtocolNumber, nil, 1500, 9, 64)
	header.IPv4(frag).SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
	later := bytes.Clone(frag)
	header.IPv4(later).SetFlagsFragmentOffset(0, 1480)
	require.Equal(t, link.FlowHash(frag, ports(53, 53)), link.FlowHash(later, nil))

	// Short or unknown headers hash without panicking.
	for _, b := range [][]byte{nil, {0x45}, {0x60, 0}, {0x10, 1, 2, 3}} {
		link.FlowHash(b, []byte{1})
	}
}

func TestTunFlowHashSpreads(t *testing.T) {
	const flows = 4096
	for _, tc := range []struct {
		name string
		hash func(i int) uint32
	}{
		{"ipv4 source ports", func(i int) uint32 {
			l4 := ports(uint16(32768+i), 5001)
			return link.FlowHash(ipv4(src4, dst4, header.TCPProtocolNumber, l4, 60, 0, 64), l4)
		}},
		{"ipv4 sources", func(i int) uint32 {
			src := tcpip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
			return link.FlowHash(ipv4(src, dst4, header.ICMPv4ProtocolNumber, nil, 84, 0, 64), nil)
		}},
		{"ipv6 source ports", func(i int) uint32 {
			b := make([]byte, header.IPv6MinimumSize)
			header.IPv6(b).Encode(&header.IPv6Fields{TransportProtocol: header.UDPProtocolNumber, SrcAddr: src6, DstAddr: dst6})
			return link.FlowHash(b, ports(uint16(i), 53))
		}},
	} {
		for _, n := range []int{2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d queues", tc.name, n), func(t *testing.T) {
				counts := make([]int, n)
				for i := range flows {
					counts[link.QueueIndex(tc.hash(i), n)]++
				}
				// Within a quarter of a fair share: a binomial spread of
				// 4096 flows stays well inside that.
				fair := flows / n
				for q, c := range counts {
					require.InDelta(t, fair, c, float64(fair)/4, "queue %d of %d got %d of %d flows: %v", q, n, c, flows, counts)
				}
			})
		}
	}
}

func TestTunQueueIndexRange(t *testing.T) {
	for _, h := range []uint32{0, 1, 1 << 31, 0xffffffff} {
		for n := 1; n <= MaxQueues; n++ {
			i := link.QueueIndex(h, n)
			require.True(t, i >= 0 && i < n, "hash %#x over %d queues gave %d", h, n, i)
		}
	}
}

// udpSuper builds a UDP super-packet (as the kernel hands it over with
// USO): one IP and UDP header, then payload for many datagrams, with the
// pseudo-header sum in the UDP checksum field.
func udpSuper(v6 bool, payload []byte) ([]byte, vnet.Header) {
	var ip []byte
	var l4 int
	udpLen := uint16(header.UDPMinimumSize + len(payload))
	if v6 {
		l4 = header.IPv6MinimumSize
		ip = make([]byte, l4+int(udpLen))
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: udpLen, TransportProtocol: header.UDPProtocolNumber, HopLimit: 64, SrcAddr: src6, DstAddr: dst6})
	} else {
		l4 = header.IPv4MinimumSize
		ip = make([]byte, l4+int(udpLen))
		v4 := header.IPv4(ip)
		v4.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), ID: 0xfffe, TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src4, DstAddr: dst4})
		v4.SetChecksum(^v4.CalculateChecksum())
	}
	u := header.UDP(ip[l4:])
	u.Encode(&header.UDPFields{SrcPort: 4000, DstPort: 5000, Length: udpLen})
	copy(ip[l4+header.UDPMinimumSize:], payload)
	src, dst := src4, dst4
	if v6 {
		src, dst = src6, dst6
	}
	u.SetChecksum(header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, udpLen))
	return ip, vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOUDPL4, HdrLen: uint16(l4 + 8), GSOSize: 1000, CsumStart: uint16(l4), CsumOffset: 6}
}

// ethHeader is an Ethernet header from the kernel's side of a TAP device
// to ustack's, for frames of protocol proto.
func ethHeader(proto tcpip.NetworkProtocolNumber) []byte {
	b := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: kernelMAC, DstAddr: ustackMAC, Type: proto})
	return b
}

var (
	kernelMAC = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01")
	ustackMAC = tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02")
)

// withLink puts the Ethernet header eth (none if empty) in front of the IP
// packet ip, and moves h's offsets behind it, as a TAP device's frame
// carries them.
func withLink(eth, ip []byte, h vnet.Header) ([]byte, vnet.Header) {
	if len(eth) == 0 {
		return ip, h
	}
	h.CsumStart += uint16(len(eth))
	h.HdrLen += uint16(len(eth))
	return append(bytes.Clone(eth), ip...), h
}

func TestTunSplitUSO(t *testing.T) {
	for _, tap := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			for _, size := range []int{1, 999, 1000, 1001, 9500, 64000} {
				t.Run(fmt.Sprintf("tap=%v/v6=%v/%d", tap, v6, size), func(t *testing.T) {
					payload := make([]byte, size)
					for i := range payload {
						payload[i] = byte(i*7 + i>>8)
					}
					ip, h := udpSuper(v6, payload)
					var eth []byte
					if tap {
						eth = ethHeader(header.IPv4ProtocolNumber)
						if v6 {
							eth = ethHeader(header.IPv6ProtocolNumber)
						}
					}
					fr, fh := withLink(eth, ip, h)
					require.NoError(t, fh.Check(len(fr)))
					var got []byte
					var ids []uint16
					counted := -1
					n, err := splitUSO(fh, fr, len(eth), make([]byte, maxFrameSize), func(n int) { counted = n }, func(f []byte) {
						require.Positive(t, counted, "counted before the first datagram is emitted")
						require.True(t, bytes.Equal(eth, f[:len(eth)]), "every datagram behind the frame's link header")
						d := f[len(eth):]
						require.True(t, vnet.VerifyIP(d), "datagram %d has bad checksums", len(ids))
						l4 := int(h.CsumStart)
						u := header.UDP(d[l4:])
						require.Equal(t, len(d)-l4, int(u.Length()))
						require.LessOrEqual(t, len(u.Payload()), int(h.GSOSize))
						if v6 {
							require.Equal(t, len(d)-header.IPv6MinimumSize, int(header.IPv6(d).PayloadLength()))
						} else {
							require.Equal(t, len(d), int(header.IPv4(d).TotalLength()))
							ids = append(ids, header.IPv4(d).ID())
						}
						require.Equal(t, uint16(4000), u.SourcePort())
						got = append(got, u.Payload()...)
					})
					require.NoError(t, err)
					require.Equal(t, (size+999)/1000, n)
					require.Equal(t, n, counted, "count was told what followed")
					require.Equal(t, payload, got, "the datagrams carry the payload in order")
					for i, id := range ids {
						require.Equal(t, uint16(0xfffe+i), id, "IPv4 IDs count up from the super-packet's, wrapping")
					}
				})
			}
		}
	}
}

func TestTunSplitUSOMalformed(t *testing.T) {
	ip, h := udpSuper(false, make([]byte, 3000))
	scratch := make([]byte, maxFrameSize)
	for _, tc := range []struct {
		name string
		mod  func(ip []byte, h *vnet.Header) []byte
	}{
		{"no partial checksum", func(ip []byte, h *vnet.Header) []byte { h.Flags = 0; return ip }},
		{"wrong checksum offset", func(ip []byte, h *vnet.Header) []byte { h.CsumOffset = 16; return ip }},
		{"UDP beyond the packet", func(ip []byte, h *vnet.Header) []byte { return ip[:24] }},
		{"IPv4 options not matching", func(ip []byte, h *vnet.Header) []byte { h.CsumStart = 24; return ip }},
		{"not UDP", func(ip []byte, h *vnet.Header) []byte { ip[9] = 6; return ip }},
		{"no payload", func(ip []byte, h *vnet.Header) []byte { return ip[:28] }},
		{"too many datagrams", func(ip []byte, h *vnet.Header) []byte { h.GSOSize = 10; return ip }},
		{"not IP", func(ip []byte, h *vnet.Header) []byte { ip[0] = 0x15; return ip }},
		{"IPv6 header cut", func(ip []byte, h *vnet.Header) []byte { ip[0] = 0x60; return ip }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, hc := bytes.Clone(ip), h
			c = tc.mod(c, &hc)
			n, err := splitUSO(hc, c, 0, scratch, func(int) { t.Fatal("counted a malformed packet") }, func([]byte) { t.Fatal("emitted a datagram of a malformed packet") })
			require.Error(t, err)
			require.Zero(t, n)
		})
	}
	_, err := splitUSO(h, ip, 0, make([]byte, 100), func(int) {}, func([]byte) {})
	require.ErrorContains(t, err, "datagram buffer")
	// Behind a link header, the offsets count from the frame's start: one
	// that points into the link header, or a frame shorter than it, is
	// refused.
	fr, fh := withLink(ethHeader(header.IPv4ProtocolNumber), ip, h)
	for _, tc := range []struct {
		name string
		fr   []byte
		h    vnet.Header
	}{
		{"checksum in the link header", fr, vnet.Header{Flags: fh.Flags, GSOType: fh.GSOType, GSOSize: fh.GSOSize, CsumStart: 4, CsumOffset: 6}},
		{"offsets not moved", fr, h},
		{"shorter than the link header", fr[:10], fh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := splitUSO(tc.h, tc.fr, header.EthernetMinimumSize, scratch, func(int) { t.Fatal("counted a malformed packet") }, func([]byte) { t.Fatal("emitted a datagram of a malformed packet") })
			require.Error(t, err)
			require.Zero(t, n)
		})
	}
}

// tcp4Packet builds an IPv4 TCP packet with correct checksums.
func tcp4Packet(payload []byte, sport uint16) []byte {
	return tcp4Segment(payload, sport, 7)
}

// tcp4Seq builds an IPv4 TCP segment of one flow at sequence number seq.
func tcp4Seq(payload []byte, seq uint32) []byte { return tcp4Segment(payload, 1, seq) }

// tcp4Segment builds an IPv4 TCP segment from port sport at sequence
// number seq, with right checksums.
func tcp4Segment(payload []byte, sport uint16, seq uint32) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src4, DstAddr: dst4})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(b[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{SrcPort: sport, DstPort: 80, SeqNum: seq, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 1000})
	copy(b[header.IPv4MinimumSize+header.TCPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src4, dst4, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	return b
}

func frame(h vnet.Header, ip []byte) []byte {
	b := make([]byte, vnet.HeaderSize+len(ip))
	h.Encode(b)
	copy(b[vnet.HeaderSize:], ip)
	return b
}

// FuzzSplitUSO: no header or packet panics the split; when it succeeds,
// it was counted first, every datagram holds at most GSOSize bytes of
// payload with right lengths and checksums, and together they carry the
// super-packet's payload in order. The same packet behind an Ethernet
// header (a TAP device's frame, the offsets moved behind it) splits into
// the same datagrams, each behind that header.
func FuzzSplitUSO(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{1, 1000, 2500} {
			ip, h := udpSuper(v6, make([]byte, size))
			f.Add(ip, h.Flags, h.GSOSize, h.CsumStart, h.CsumOffset)
		}
	}
	f.Fuzz(func(t *testing.T, ip []byte, flags uint8, gsoSize, csumStart, csumOffset uint16) {
		h := vnet.Header{Flags: flags, GSOType: vnet.GSOUDPL4, GSOSize: gsoSize, CsumStart: csumStart, CsumOffset: csumOffset, HdrLen: csumStart + 8}
		if h.Check(len(ip)) != nil {
			return // the receive path refuses such a header before splitting
		}
		counted := -1
		var got [][]byte
		n, err := splitUSO(h, ip, 0, make([]byte, maxFrameSize), func(n int) { counted = n }, func(d []byte) {
			if counted < 0 {
				t.Fatal("a datagram before the count")
			}
			if !vnet.VerifyIP(d) {
				t.Fatalf("datagram %d has bad lengths or checksums", len(got))
			}
			l4 := int(h.CsumStart)
			u := header.UDP(d[l4:])
			if int(u.Length()) != len(d)-l4 || len(u.Payload()) > int(h.GSOSize) {
				t.Fatalf("datagram %d: UDP length %d for %d bytes, payload %d of at most %d", len(got), u.Length(), len(d)-l4, len(u.Payload()), h.GSOSize)
			}
			got = append(got, bytes.Clone(d))
		})
		eth := ethHeader(header.IPv4ProtocolNumber)
		fr, fh := withLink(eth, ip, h)
		var framed [][]byte
		fn, ferr := splitUSO(fh, fr, len(eth), make([]byte, maxFrameSize), func(int) {}, func(f []byte) {
			if !bytes.Equal(f[:len(eth)], eth) {
				t.Fatalf("datagram %d behind % x, not the frame's link header", len(framed), f[:len(eth)])
			}
			framed = append(framed, bytes.Clone(f[len(eth):]))
		})
		if (err == nil) != (ferr == nil) || n != fn {
			t.Fatalf("without a link header: %d datagrams, %v; behind one: %d, %v", n, err, fn, ferr)
		}
		if err != nil {
			if len(got) > 0 || counted >= 0 {
				t.Fatalf("failed (%v) after counting %d and emitting %d", err, counted, len(got))
			}
			return
		}
		if n != len(got) || n != counted {
			t.Fatalf("returned %d, counted %d, emitted %d", n, counted, len(got))
		}
		var payload []byte
		for i, d := range got {
			if !bytes.Equal(d, framed[i]) {
				t.Fatalf("datagram %d differs behind a link header", i)
			}
			payload = append(payload, header.UDP(d[int(h.CsumStart):]).Payload()...)
		}
		want := ip[int(h.CsumStart)+header.UDPMinimumSize:]
		if !bytes.Equal(payload, want) {
			t.Fatalf("datagrams carry %d bytes, the super-packet %d", len(payload), len(want))
		}
	})
}
