package stack

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// recordQdisc records what reaches it, as "FLAGS ACK".
type recordQdisc struct {
	mu     sync.Mutex
	got    []string
	closed bool
}

func (r *recordQdisc) WritePacket(pkt *gstack.PacketBuffer) tcpip.Error {
	t := header.TCP(pkt.TransportHeader().Slice())
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s %d", strings.ReplaceAll(t.Flags().String(), " ", ""), t.AckNumber()))
	r.mu.Unlock()
	return nil
}

func (r *recordQdisc) Close() { r.closed = true }

func (r *recordQdisc) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// segment writes one outgoing TCP/IPv4 segment of port sport through a,
// with payload bytes of data and opts as its options.
func segment(t *testing.T, a *ackDelayer, sport uint16, flags header.TCPFlags, ack uint32, payload int, opts []byte) {
	t.Helper()
	pkt := tcpPacket(sport, flags, ack, payload, opts)
	defer pkt.DecRef()
	require.Nil(t, a.WritePacket(pkt))
}

// tcpPacket builds one outgoing TCP/IPv4 segment of port sport, with
// payload bytes of data and opts as its options.
func tcpPacket(sport uint16, flags header.TCPFlags, ack uint32, payload int, opts []byte) *gstack.PacketBuffer {
	thl := header.TCPMinimumSize + len(opts)
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{
		ReserveHeaderBytes: header.IPv4MinimumSize + thl,
		Payload:            buffer.MakeWithData(make([]byte, payload)),
	})
	tcp := header.TCP(pkt.TransportHeader().Push(thl))
	tcp.Encode(&header.TCPFields{SrcPort: sport, DstPort: 80, SeqNum: 1, AckNum: ack, DataOffset: uint8(thl), Flags: flags, WindowSize: 1000})
	copy(tcp[header.TCPMinimumSize:], opts)
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(header.IPv4MinimumSize + thl + payload),
		Protocol:    uint8(header.TCPProtocolNumber),
		TTL:         64,
		SrcAddr:     tcpip.AddrFrom4([4]byte{198, 18, 0, 1}),
		DstAddr:     tcpip.AddrFrom4([4]byte{198, 18, 0, 2}),
	})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

const ack, psh = header.TCPFlagAck, header.TCPFlagAck | header.TCPFlagPsh

// TestACKDelayerRequestResponse: a flow is held back only once it has
// answered within the delay; its answer then carries the held ACK, which
// is dropped; a second pure ACK, a flag or SACK blocks send at once.
func TestACKDelayerRequestResponse(t *testing.T) {
	rec := &recordQdisc{}
	a := newACKDelayer(rec, time.Hour) // the timer never fires here
	defer a.Close()

	segment(t, a, 1000, ack, 100, 0, nil) // unknown flow: at once
	segment(t, a, 1000, psh, 100, 1, nil) // it answers: request/response
	segment(t, a, 1000, ack, 200, 0, nil) // held
	require.Equal(t, []string{"A 100", "PA 100"}, rec.sent())
	segment(t, a, 1000, psh, 200, 1, nil) // carries it
	require.Equal(t, []string{"A 100", "PA 100", "PA 200"}, rec.sent())
	require.Equal(t, ACKStats{Held: 1, Merged: 1}, a.stats())

	// Another flow's pure ACK is not held while one is, nor is it known.
	segment(t, a, 1000, ack, 300, 0, nil)
	segment(t, a, 2000, ack, 7, 0, nil)
	require.Equal(t, []string{"A 100", "PA 100", "PA 200", "A 7"}, rec.sent())
	// A second pure ACK of the flow: both leave, in order, and the flow
	// is no longer held back.
	segment(t, a, 1000, ack, 400, 0, nil)
	segment(t, a, 1000, ack, 500, 0, nil)
	require.Equal(t, []string{"A 100", "PA 100", "PA 200", "A 7", "A 300", "A 400", "A 500"}, rec.sent())

	// Relearned, then: timestamps may be held; SACK blocks and FIN not.
	segment(t, a, 1000, psh, 500, 1, nil)
	ts := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, header.TCPOptionTSLength, 0, 0, 0, 1, 0, 0, 0, 2}
	segment(t, a, 1000, ack, 600, 0, ts)
	require.Equal(t, uint64(3), a.stats().Held)
	segment(t, a, 1000, psh, 600, 1, nil)
	sack := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	segment(t, a, 1000, ack, 600, 0, sack)
	segment(t, a, 1000, header.TCPFlagAck|header.TCPFlagFin, 600, 0, nil)
	require.Equal(t, ACKStats{Held: 3, Merged: 2}, a.stats())
	require.Equal(t, []string{"A 100", "PA 100", "PA 200", "A 7", "A 300", "A 400", "A 500", "PA 500", "PA 600", "A 600", "FA 600"}, rec.sent())
}

// TestACKDelayerHoldsOnlyWellFormedTimestamps: an ACK whose timestamp
// option has a bad length byte is no pure ACK (link.IsPureACK) and
// leaves at once, where the same ACK with a proper option is held.
func TestACKDelayerHoldsOnlyWellFormedTimestamps(t *testing.T) {
	rec := &recordQdisc{}
	a := newACKDelayer(rec, time.Hour) // the timer never fires here
	defer a.Close()
	segment(t, a, 1000, ack, 100, 0, nil)
	segment(t, a, 1000, psh, 100, 1, nil) // request/response from now on
	badTS := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, 8, 0, 0, 0, 1, 0, 0, 0, 2}
	segment(t, a, 1000, ack, 200, 0, badTS)
	require.Equal(t, []string{"A 100", "PA 100", "A 200"}, rec.sent())
	require.Zero(t, a.stats().Held)
	ts := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionTS, header.TCPOptionTSLength, 0, 0, 0, 1, 0, 0, 0, 2}
	segment(t, a, 1000, ack, 300, 0, ts)
	require.Equal(t, uint64(1), a.stats().Held)
	require.Equal(t, []string{"A 100", "PA 100", "A 200"}, rec.sent())
}

// TestACKDelayerExpires: a held ACK no segment carried leaves when the
// delay runs out, and the flow's next ACK goes at once.
func TestACKDelayerExpires(t *testing.T) {
	rec := &recordQdisc{}
	a := newACKDelayer(rec, time.Millisecond)
	defer a.Close()
	// Learning needs the answer within the delay: retry until this
	// machine is quick enough, which it is at once unless very loaded.
	require.Eventually(t, func() bool {
		segment(t, a, 1000, ack, 100, 0, nil)
		segment(t, a, 1000, psh, 100, 1, nil)
		segment(t, a, 1000, ack, 200, 0, nil)
		return a.stats().Held == 1
	}, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return a.stats().Expired == 1 }, 10*time.Second, time.Millisecond)
	got := rec.sent()
	require.Equal(t, "A 200", got[len(got)-1])
	segment(t, a, 1000, ack, 300, 0, nil)
	require.Equal(t, "A 300", rec.sent()[len(rec.sent())-1])
	require.Equal(t, uint64(1), a.stats().Held)
}

// TestACKDelayerClose: Close drops a held ACK (no reference leaks: the
// package's leak check) and closes the discipline behind.
func TestACKDelayerClose(t *testing.T) {
	rec := &recordQdisc{}
	a := newACKDelayer(rec, time.Hour)
	segment(t, a, 1000, ack, 100, 0, nil)
	segment(t, a, 1000, psh, 100, 1, nil)
	segment(t, a, 1000, ack, 200, 0, nil)
	require.Equal(t, uint64(1), a.stats().Held)
	a.Close()
	require.True(t, rec.closed)
	require.Equal(t, []string{"A 100", "PA 100"}, rec.sent())
}

// discardQdisc takes every packet and keeps none.
type discardQdisc struct{}

func (discardQdisc) WritePacket(*gstack.PacketBuffer) tcpip.Error { return nil }
func (discardQdisc) Close()                                       {}

// BenchmarkACKDelayer is the delayed ACK's cost on the path of every TCP
// packet, against the discipline behind it alone (direct): a bulk
// sender's data segments, which it only inspects, and a request/response
// exchange, whose pure ACK it holds until the answer carries it.
func BenchmarkACKDelayer(b *testing.B) {
	data := tcpPacket(1000, psh, 100, 1448, nil)
	defer data.DecRef()
	pure := tcpPacket(1000, ack, 100, 0, nil)
	defer pure.DecRef()
	b.Run("direct", func(b *testing.B) {
		var q gstack.QueueingDiscipline = discardQdisc{}
		b.ReportAllocs()
		for b.Loop() {
			q.WritePacket(data)
		}
	})
	b.Run("data", func(b *testing.B) {
		a := newACKDelayer(discardQdisc{}, time.Hour)
		defer a.Close()
		b.ReportAllocs()
		for b.Loop() {
			a.WritePacket(data)
		}
	})
	b.Run("exchange", func(b *testing.B) {
		a := newACKDelayer(discardQdisc{}, time.Hour)
		defer a.Close()
		a.WritePacket(pure)
		a.WritePacket(data) // the flow answers: request/response from now on
		b.ReportAllocs()
		for b.Loop() {
			a.WritePacket(pure) // held
			a.WritePacket(data) // carries it: dropped
		}
		if a.merged.Load() == 0 {
			b.Fatal("no ACK was held and carried")
		}
	})
}

// TestACKDelayerStopsWatching: a pure ACK whose flow did not answer within
// the delay is forgotten at the next segment, which then learns nothing,
// and segments pass without a look again until the next pure ACK.
func TestACKDelayerStopsWatching(t *testing.T) {
	rec := &recordQdisc{}
	a := newACKDelayer(rec, time.Millisecond)
	defer a.Close()
	require.False(t, a.watching.Load(), "nothing to watch yet")
	segment(t, a, 1000, ack, 100, 0, nil)
	require.True(t, a.watching.Load(), "waiting to see whether the flow answers")
	time.Sleep(5 * time.Millisecond) // longer than the delay
	segment(t, a, 1000, psh, 100, 1, nil)
	require.False(t, a.watching.Load(), "the answer came too late: watching stopped")
	segment(t, a, 1000, ack, 200, 0, nil) // not request/response: at once
	require.Equal(t, []string{"A 100", "PA 100", "A 200"}, rec.sent())
	require.Zero(t, a.stats().Held)
}
