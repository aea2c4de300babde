package vnet

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	src4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	dst4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 2})
	src6 = tcpip.AddrFrom16([16]byte{0xfd, 15: 1})
	dst6 = tcpip.AddrFrom16([16]byte{0xfd, 15: 2})
)

// tcp4 builds an IPv4 TCP packet with correct checksums, or with the
// pseudo-header sum only in the TCP checksum field (partial).
func tcp4(payload []byte, partial bool) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src4, DstAddr: dst4})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(b[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{SrcPort: 1000, DstPort: 80, SeqNum: 7, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 1000})
	copy(b[header.IPv4MinimumSize+header.TCPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src4, dst4, uint16(len(tcp)))
	if partial {
		tcp.SetChecksum(xsum)
	} else {
		tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	}
	return b
}

func udp6(payload []byte) []byte {
	b := make([]byte, header.IPv6MinimumSize+header.UDPMinimumSize+len(payload))
	ip := header.IPv6(b)
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(header.UDPMinimumSize + len(payload)), TransportProtocol: header.UDPProtocolNumber, HopLimit: 64, SrcAddr: src6, DstAddr: dst6})
	u := header.UDP(b[header.IPv6MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: 5, DstPort: 7, Length: uint16(len(u))})
	copy(b[header.IPv6MinimumSize+header.UDPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src6, dst6, uint16(len(u)))
	u.SetChecksum(^checksum.Checksum(u, xsum))
	return b
}

func TestEncodeDecode(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, HdrLen: 74, GSOSize: 1440, CsumStart: 54, CsumOffset: 16}
	b := make([]byte, HeaderSize)
	h.Encode(b)
	require.Equal(t, []byte{1, 4, 74, 0, 0xa0, 5, 54, 0, 16, 0}, b, "little-endian, as the kernel reads it")
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	_, err = Decode(b[:9])
	require.ErrorIs(t, err, ErrShort)
}

func TestCheck(t *testing.T) {
	require.NoError(t, Header{}.Check(0))
	require.NoError(t, Header{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 16}.Check(38))
	require.Error(t, Header{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 16}.Check(37))
	require.Error(t, Header{GSOType: GSOTCPv4}.Check(100), "zero segment size")
	require.Error(t, Header{GSOType: 9, GSOSize: 10}.Check(100))
	require.Error(t, Header{GSOType: GSOTCPv4, GSOSize: 10, HdrLen: 200}.Check(100))
	require.NoError(t, Header{GSOType: GSOTCPv4 | GSOECN, GSOSize: 10, HdrLen: 54}.Check(100))
}

func TestVerifyIP(t *testing.T) {
	good4 := tcp4([]byte("hello"), false)
	require.True(t, VerifyIP(good4))
	require.Equal(t, Verified, Inspect(Header{}, good4))
	bad := bytes.Clone(good4)
	bad[len(bad)-1] ^= 1
	require.False(t, VerifyIP(bad))
	require.Equal(t, Bad, Inspect(Header{}, bad))
	require.Equal(t, Trusted, Inspect(Header{Flags: FlagDataValid}, bad), "the kernel's verdict stands")

	good6 := udp6([]byte("world!"))
	require.True(t, VerifyIP(good6))
	bad6 := bytes.Clone(good6)
	bad6[45] ^= 0x80
	require.False(t, VerifyIP(bad6))

	hdr := bytes.Clone(good4)
	hdr[8]-- // TTL: the IPv4 header checksum no longer matches
	require.False(t, VerifyIP(hdr))
	require.Equal(t, Bad, CheckIP(hdr))
	for name, p := range map[string][]byte{
		"empty":      nil,
		"short IPv4": {0x45, 0, 0},
		"cut IPv4":   good4[:len(good4)-1],
		"cut TCP header": func() []byte {
			p := header.IPv4(bytes.Clone(good4[:30]))
			p.SetTotalLength(30)
			p.SetChecksum(0)
			p.SetChecksum(^p.CalculateChecksum())
			return p
		}(),
		"IPv6 past the end": good6[:len(good6)-1],
		"version 5":         append([]byte{0x50}, good4[1:]...),
	} {
		require.Equal(t, Malformed, CheckIP(p), name)
		require.False(t, VerifyIP(p), name)
	}
}

func TestCompleteMatchesFullChecksum(t *testing.T) {
	for _, n := range []int{0, 1, 2, 1000, 1001} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 31)
		}
		p := tcp4(payload, true)
		require.False(t, VerifyIP(p) && n > 0 && payload[0] != 0, "partial is not yet valid")
		h := Header{Flags: FlagNeedsCsum, CsumStart: header.IPv4MinimumSize, CsumOffset: header.TCPChecksumOffset}
		require.NoError(t, h.Check(len(p)))
		Complete(h, p)
		require.Equal(t, tcp4(payload, false), p)
	}
}

func TestForTX(t *testing.T) {
	// A gVisor host-GSO TCP super-segment: 10 MSS worth of payload.
	payload := make([]byte, 14400)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 100, Payload: buffer.MakeWithData(payload)})
	defer pkt.DecRef()
	tcp := header.TCP(pkt.TransportHeader().Push(32))
	tcp.Encode(&header.TCPFields{DataOffset: 32})
	pkt.NetworkHeader().Push(header.IPv6MinimumSize)
	pkt.GSOOptions = stack.GSO{Type: stack.GSOTCPv6, NeedsCsum: true, CsumOffset: header.TCPChecksumOffset, MSS: 1440, L3HdrLen: header.IPv6MinimumSize}
	h := ForTX(pkt, header.EthernetMinimumSize)
	require.Equal(t, Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, HdrLen: 14 + 40 + 32, GSOSize: 1440, CsumStart: 54, CsumOffset: 16}, h)

	// One segment's worth stays unsegmented but keeps its partial checksum.
	small := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 100, Payload: buffer.MakeWithData(make([]byte, 100))})
	defer small.DecRef()
	small.TransportHeader().Push(20)
	small.GSOOptions = pkt.GSOOptions
	small.GSOOptions.Type = stack.GSOTCPv4
	small.GSOOptions.L3HdrLen = 20
	h = ForTX(small, 0)
	require.Equal(t, Header{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 16}, h)

	plain := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData([]byte{1})})
	defer plain.DecRef()
	require.Equal(t, Header{}, ForTX(plain, 14))
}

// FuzzHeader: any bytes decode; a decoded header encodes back to the same
// bytes; Check never panics, and a header that passes it can be used to
// complete a checksum without indexing out of range.
func FuzzHeader(f *testing.F) {
	f.Add([]byte{1, 4, 74, 0, 0xa0, 5, 54, 0, 16, 0}, 200)
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 60)
	f.Add([]byte{1, 1, 0xff, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff}, 10)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		h, err := Decode(b)
		if err != nil {
			if len(b) >= HeaderSize {
				t.Fatalf("decode of %d bytes failed: %v", len(b), err)
			}
			return
		}
		out := make([]byte, HeaderSize)
		h.Encode(out)
		if !bytes.Equal(out, b[:HeaderSize]) {
			t.Fatalf("round trip: %x -> %+v -> %x", b[:HeaderSize], h, out)
		}
		n = n % 70000
		if n < 0 {
			n = -n
		}
		if h.Check(n) == nil && h.Flags&FlagNeedsCsum != 0 {
			Complete(h, make([]byte, n))
		}
	})
}

// FuzzVerifyIP: no input panics it, and a valid packet with one bit
// flipped in its transport payload is rejected.
func FuzzVerifyIP(f *testing.F) {
	f.Add(tcp4([]byte("seed"), false), 0)
	f.Add(udp6([]byte("seed six")), 3)
	f.Add([]byte{0x45}, 0)
	f.Fuzz(func(t *testing.T, b []byte, flip int) {
		ok := VerifyIP(b)
		if !ok || len(b) < header.IPv4MinimumSize+header.TCPMinimumSize+1 {
			return
		}
		if header.IPVersion(b) != header.IPv4Version || header.IPv4(b).Protocol() != uint8(header.TCPProtocolNumber) {
			return
		}
		ip := header.IPv4(b)
		if ip.More() || ip.FragmentOffset() != 0 || int(ip.TotalLength()) != len(b) {
			return
		}
		c := bytes.Clone(b)
		i := int(ip.HeaderLength()) + header.TCPMinimumSize + (flip&0x7fffffff)%(len(b)-int(ip.HeaderLength())-header.TCPMinimumSize)
		if i >= len(c) {
			return
		}
		c[i] ^= 1
		if VerifyIP(c) {
			t.Fatalf("a flipped payload bit at %d passed: % x", i, c)
		}
	})
}
