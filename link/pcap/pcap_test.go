package pcap_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/link/pcap"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// ipPacket returns an IPv4 (v6 false) or IPv6 UDP packet of n bytes in
// all from port sport, its payload numbered so each packet differs.
func ipPacket(v6 bool, sport uint16, n int) []byte {
	ipLen := header.IPv4MinimumSize
	if v6 {
		ipLen = header.IPv6MinimumSize
	}
	b := make([]byte, n)
	for i := ipLen + header.UDPMinimumSize; i < n; i++ {
		b[i] = byte(i*7 + int(sport))
	}
	if v6 {
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength: uint16(n - ipLen), TransportProtocol: header.UDPProtocolNumber, HopLimit: 64,
			SrcAddr: tcpip.AddrFrom16(stacktest.A6.As16()), DstAddr: tcpip.AddrFrom16(stacktest.B6.As16()),
		})
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(min(n, 0xffff)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
			SrcAddr: tcpip.AddrFrom4(stacktest.A4.As4()), DstAddr: tcpip.AddrFrom4(stacktest.B4.As4()),
		})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	u := header.UDP(b[ipLen:])
	u.Encode(&header.UDPFields{SrcPort: sport, DstPort: 9, Length: uint16(min(n-ipLen, 0xffff))})
	return b
}

// outgoing builds a packet as the stack hands it to a link: its first
// hdr bytes pushed as the network header (into reserved room, so the
// buffer starts with unused bytes), the rest as a payload of two views.
func outgoing(b []byte, hdr int) *gstack.PacketBuffer {
	payload := buffer.MakeWithData(append([]byte(nil), b[hdr:hdr+(len(b)-hdr)/2]...))
	payload.Append(buffer.NewViewWithData(append([]byte(nil), b[hdr+(len(b)-hdr)/2:]...)))
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{ReserveHeaderBytes: 64, Payload: payload})
	copy(pkt.NetworkHeader().Push(hdr), b[:hdr])
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if header.IPVersion(b) == header.IPv6Version {
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	}
	return pkt
}

// write writes pkts through ep in one batch, drops the references and
// returns how many ep took.
func write(ep gstack.LinkEndpoint, pkts ...*gstack.PacketBuffer) int {
	var l gstack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(p)
	}
	n, _ := ep.WritePackets(l)
	for _, p := range pkts {
		p.DecRef()
	}
	return n
}

// TestRoundTrip captures received and sent packets of both IP versions,
// one longer than the snap length (a super-segment), over a raw-IP link,
// and reads them back: the file header, each record's bytes, length and
// time, in the order they crossed, and the counts.
func TestRoundTrip(t *testing.T) {
	var out bytes.Buffer
	lower := linktest.NewEndpoint(&linktest.Writer{Keep: true})
	before := time.Now()
	ep, err := pcap.New(lower, &out, nil)
	require.NoError(t, err)
	require.EqualValues(t, pcap.LinkTypeRaw, ep.LinkType())
	sink := linktest.NewSink()
	ep.Attach(sink)

	rx4, rx6 := ipPacket(false, 1, 60), ipPacket(true, 2, 1500)
	tx4, tx6 := ipPacket(false, 3, 1400), ipPacket(true, 4, 90)
	super := ipPacket(false, 5, pcap.DefaultSnapLen+1000) // a GSO super-segment: longer than an IPv4 packet
	require.True(t, lower.Inject(rx4))
	require.Equal(t, 2, write(ep, outgoing(tx4, header.IPv4MinimumSize), outgoing(tx6, header.IPv6MinimumSize)))
	require.True(t, lower.Inject(rx6))
	require.Equal(t, 1, write(ep, outgoing(super, header.IPv4MinimumSize)))
	ep.Close()
	after := time.Now()

	require.Equal(t, 2, sink.Len(), "received packets still delivered")
	require.Len(t, lower.Written(), 3, "sent packets still written")
	require.NoError(t, ep.WriteErr())
	c := readCapture(t, out.Bytes())
	require.True(t, c.nanos)
	require.Equal(t, []uint16{2, 4}, []uint16{c.major, c.minor})
	require.EqualValues(t, pcap.DefaultSnapLen, c.snapLen)
	require.EqualValues(t, pcap.LinkTypeRaw, c.linkType)
	want := [][]byte{rx4, tx4, tx6, rx6, super}
	require.Len(t, c.records, len(want))
	last := before
	for i, r := range c.records {
		require.Equal(t, len(want[i]), r.orig, "record %d: the packet's whole length", i)
		require.Equal(t, want[i][:min(len(want[i]), pcap.DefaultSnapLen)], r.data, "record %d", i)
		require.False(t, r.at.Before(last), "record %d: in time order, after New", i)
		last = r.at
	}
	require.False(t, last.After(after), "no record after Close")
	require.Equal(t, pcap.Counts{Packets: 5, Bytes: uint64(out.Len()), Truncated: 1}, ep.Counts())
}

// ethernet is a linktest.Endpoint that says it is Ethernet and has
// 14-byte link headers, as afpacket has.
type ethernet struct{ *linktest.Endpoint }

func (ethernet) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }
func (ethernet) MaxHeaderLength() uint16                 { return header.EthernetMinimumSize }

func (ethernet) AddHeader(pkt *gstack.PacketBuffer) {
	header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize)).Encode(&header.EthernetFields{
		SrcAddr: "\x02\x00\x00\x00\x00\x01", DstAddr: "\x02\x00\x00\x00\x00\x02", Type: pkt.NetworkProtocolNumber,
	})
}

func (ethernet) ParseHeader(pkt *gstack.PacketBuffer) bool {
	_, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	return ok
}

// TestEthernet: over an Ethernet endpoint the file says Ethernet, and
// records start with the link header, sent (pushed by AddHeader, as the
// NIC does) and received (consumed by ParseHeader before delivery, as
// afpacket does).
func TestEthernet(t *testing.T) {
	var out bytes.Buffer
	lower := ethernet{linktest.NewEndpoint(nil)}
	ep, err := pcap.New(lower, &out, nil)
	require.NoError(t, err)
	require.EqualValues(t, pcap.LinkTypeEthernet, ep.LinkType())
	sink := linktest.NewSink()
	ep.Attach(sink)

	tx := outgoing(ipPacket(false, 1, 100), header.IPv4MinimumSize)
	ep.AddHeader(tx)
	v := tx.ToView()
	txFrame := bytes.Clone(v.AsSlice())
	v.Release()
	require.Equal(t, 1, write(ep, tx))

	rxFrame := append(append([]byte(nil), txFrame[6:12]...), txFrame[:6]...)
	rxFrame = append(append(rxFrame, 0x08, 0x00), ipPacket(false, 2, 80)...)
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(rxFrame)})
	require.True(t, lower.ParseHeader(pkt))
	require.True(t, lower.InjectPacket(header.IPv4ProtocolNumber, pkt))
	pkt.DecRef()
	ep.Close()

	c := readCapture(t, out.Bytes())
	require.EqualValues(t, pcap.LinkTypeEthernet, c.linkType)
	require.Len(t, c.records, 2)
	require.Equal(t, txFrame, c.records[0].data)
	require.Equal(t, rxFrame, c.records[1].data)
	require.Equal(t, 1, sink.Len())
}

// blockingWriter blocks its first Write (the file header) until release
// is closed, as a writer that fell behind does.
type blockingWriter struct {
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	buf              bytes.Buffer
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// TestSlowWriterNeverBlocks: while the writer is stuck, the data path
// goes on; what the buffer cannot hold is dropped from the capture and
// counted, the packets themselves are delivered and sent; once the writer
// moves, what was buffered is written.
func TestSlowWriterNeverBlocks(t *testing.T) {
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	lower := linktest.NewEndpoint(nil)
	// Records of 16+60 bytes: five fit in 400.
	ep, err := pcap.New(lower, w, &pcap.Options{SnapLen: 100, BufferSize: 400})
	require.NoError(t, err)
	defer ep.Close()
	select {
	case <-w.entered:
	case <-time.After(linktest.WaitTimeout):
		t.Fatal("the capture never started writing")
	}
	sink := linktest.NewSink()
	ep.Attach(sink)
	const total = 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total / 2 {
			lower.Inject(ipPacket(false, uint16(i), 60))
			write(ep, outgoing(ipPacket(false, uint16(i), 60), header.IPv4MinimumSize))
		}
	}()
	select {
	case <-done:
	case <-time.After(linktest.WaitTimeout):
		close(w.release)
		t.Fatal("the data path waited for the stuck writer")
	}
	require.Equal(t, total/2, sink.Len())
	require.Equal(t, total/2, lower.Taken())
	require.Equal(t, pcap.Counts{Dropped: total - 5}, ep.Counts(), "five records fit, none written yet")
	close(w.release)
	ep.Close()
	c := ep.Counts()
	require.Equal(t, pcap.Counts{Packets: 5, Bytes: 24 + 5*(16+60), Dropped: total - 5}, c)
	require.Len(t, readCapture(t, w.buf.Bytes()).records, 5)
}

// failingWriter takes the file header, then fails.
type failingWriter struct{ writes int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.writes++; w.writes > 1 {
		return 0, errDiskFull
	}
	return len(b), nil
}

// TestWriterFails: a writer that fails stops the capture, reported by
// WriteErr and counted in Lost, and the link goes on.
func TestWriterFails(t *testing.T) {
	lower := linktest.NewEndpoint(nil)
	ep, err := pcap.New(lower, &failingWriter{}, nil)
	require.NoError(t, err)
	for i := range 10 {
		require.Equal(t, 1, write(ep, outgoing(ipPacket(false, uint16(i), 100), header.IPv4MinimumSize)))
	}
	ep.Close()
	require.ErrorIs(t, ep.WriteErr(), errDiskFull)
	require.Equal(t, pcap.Counts{Bytes: 24, Lost: 10}, ep.Counts())
	require.Equal(t, 10, lower.Taken(), "every packet was still sent")
}

// TestCloseFlushes: Close writes what is buffered and flushes a writer
// that buffers too, so the file is whole once Close returns.
func TestCloseFlushes(t *testing.T) {
	var out bytes.Buffer
	bw := bufio.NewWriterSize(&out, 1<<20)
	lower := linktest.NewEndpoint(nil)
	ep, err := pcap.New(lower, bw, nil)
	require.NoError(t, err)
	ep.Attach(linktest.NewSink())
	for i := range 3 {
		require.True(t, lower.Inject(ipPacket(false, uint16(i), 100)))
	}
	ep.Close()
	ep.Close() // idempotent
	require.Len(t, readCapture(t, out.Bytes()).records, 3)
	require.Equal(t, uint64(out.Len()), ep.Counts().Bytes)
}

func TestNewRefuses(t *testing.T) {
	lower := linktest.NewEndpoint(nil)
	for _, c := range []struct {
		name  string
		lower gstack.LinkEndpoint
		w     io.Writer
		o     *pcap.Options
		err   string
	}{
		{"no endpoint", nil, io.Discard, nil, "nil link endpoint"},
		{"no writer", lower, nil, nil, "nil writer"},
		{"negative snap length", lower, io.Discard, &pcap.Options{SnapLen: -1}, "snap length -1"},
		{"snap length past libpcap's", lower, io.Discard, &pcap.Options{SnapLen: pcap.MaxSnapLen + 1}, "snap length 262145"},
		{"buffer smaller than a record", lower, io.Discard, &pcap.Options{SnapLen: 100, BufferSize: 115}, "buffer size 115"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pcap.New(c.lower, c.w, c.o)
			require.ErrorContains(t, err, c.err)
		})
	}
	ep, err := pcap.New(lower, io.Discard, &pcap.Options{SnapLen: 100, BufferSize: 116})
	require.NoError(t, err, "a buffer of exactly one record")
	require.Equal(t, 100, ep.SnapLen())
	ep.Close()
}

// TestCapturesSuperSegments captures one host of a pair of stacks over a
// mem link with GSO, during a TCP exchange both ways: the super-segments
// cross the link whole and are captured whole, and every packet the link
// took or delivered is in the capture (or counted as dropped).
func TestCapturesSuperSegments(t *testing.T) {
	mo := mem.DefaultOptions()
	mo.GSO = true
	var out bytes.Buffer
	var ep *pcap.Endpoint
	p := stacktest.New(t, &stacktest.Options{Mem: &mo, WrapLink: func(side string, lower gstack.LinkEndpoint) (gstack.LinkEndpoint, error) {
		if side != "a" {
			return lower, nil
		}
		var err error
		ep, err = pcap.New(lower, &out, nil)
		if err != nil {
			lower.Close()
		}
		return ep, err
	}})
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 80))
	require.NoError(t, err)
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		acc <- accepted{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), linktest.WaitTimeout)
	defer cancel()
	client, err := p.A.DialTCP(ctx, netip.AddrPortFrom(stacktest.B4, 80))
	require.NoError(t, err)
	defer client.Close()
	var server net.Conn
	select {
	case a := <-acc:
		require.NoError(t, a.err)
		server = a.c
	case <-ctx.Done():
		t.Fatal("no connection accepted")
	}
	defer server.Close()
	const size = 4 << 20
	_, err = xfer.Exchange(client, server, size, xfer.Timeout(size))
	require.NoError(t, err)
	ep.Close()

	c := readCapture(t, out.Bytes())
	counts, lst := ep.Counts(), p.LinkA.LinkStats()
	require.Len(t, c.records, int(counts.Packets))
	require.Equal(t, lst.TXPackets+lst.RXPackets, counts.Packets+counts.Dropped+counts.Lost, "every packet the link took or delivered")
	var tso, gro int
	for _, r := range c.records {
		require.Equal(t, header.IPv4Version, header.IPVersion(r.data))
		ip := header.IPv4(r.data)
		if r.orig <= int(mo.MTU) {
			continue
		}
		require.Equal(t, r.orig, len(r.data), "a super-segment within the snap length is captured whole")
		if ip.SourceAddress() == tcpip.AddrFrom4(stacktest.A4.As4()) {
			tso++
		} else {
			gro++
		}
	}
	require.Positive(t, tso, "A's super-segments, sent whole")
	require.Positive(t, gro, "B's super-segments, received whole")
}
