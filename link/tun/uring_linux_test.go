//go:build linux

package tun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// TestTunTXRing: without the virtio-net header a batch leaves in one
// system call through the ring, every packet whole and in order; with
// NoTXRing, one writev each.
func TestTunTXRing(t *testing.T) {
	for _, noRing := range []bool{false, true} {
		e, peers := pairEndpoint(t, 1, Offloads{}, &Options{NoTXRing: noRing})
		if !noRing {
			requireRing(t, e.queues[0].ring != nil)
		}
		const count = txRingEntries + 6 // two trips
		var pkts []*stack.PacketBuffer
		for i := range count {
			payload := make([]byte, 100+i)
			for j := range payload {
				payload[j] = byte(i + j)
			}
			p := outPacket(1000, payload, false)
			defer p.DecRef()
			pkts = append(pkts, p)
		}
		n, err := e.WritePackets(list(pkts...))
		require.Nil(t, err)
		require.Equal(t, count, n)
		for i, p := range pkts {
			require.Equal(t, flat(p), readPeer(t, peers[0]), "packet %d", i)
		}
		s := e.LinkStats()
		require.Equal(t, uint64(count), s.TXPackets)
		want := uint64(count)
		if !noRing {
			want = 2
		}
		require.Equal(t, want, s.TXSyscalls, "NoTXRing %v", noRing)
	}
}

// ringPackets writes count IPv4 TCP packets of distinct flows and sizes
// (from 40 bytes up to size) to the peer, and returns them.
func ringPackets(t *testing.T, peer, count, size int) [][]byte {
	t.Helper()
	var want [][]byte
	for i := range count {
		payload := make([]byte, (i*97)%(size-header.IPv4MinimumSize-header.TCPMinimumSize+1))
		for j := range payload {
			payload[j] = byte(i + j)
		}
		p := tcp4Packet(payload, uint16(1000+i))
		_, err := unix.Write(peer, p)
		require.NoError(t, err)
		want = append(want, p)
	}
	return want
}

// requireDelivered checks that the sink got exactly want, in order.
func requireDelivered(t *testing.T, s *linktest.Sink, want [][]byte) {
	t.Helper()
	got := s.Wait(t, len(want))
	require.Len(t, got, len(want))
	for i, p := range got {
		require.Equal(t, want[i], p.Data, "packet %d", i)
	}
}

// TestTunRXRing: without the virtio-net header a round that finds many
// packets reads them in trips through the ring, every packet whole and in
// order, in far fewer system calls than packets; with NoRXRing, or once the
// kernel refused the ring, one read(2) each.
func TestTunRXRing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noRing  bool
		refused bool
	}{{"ring", false, false}, {"NoRXRing", true, false}, {"refused", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// NoGRO: GRO would deliver the flows' packets by bucket, out
			// of the order they arrived in.
			e, peers := pairEndpoint(t, 1, Offloads{}, &Options{NoRXRing: tc.noRing, NoGRO: true, RXBatch: MaxRXBatch})
			q := e.queues[0]
			if !tc.noRing {
				requireRing(t, q.rxRing != nil)
			}
			if tc.noRing {
				require.Nil(t, q.rxRing)
			}
			if tc.refused {
				q.rxRing.off = true // as after EPERM from a seccomp filter
			}
			s := linktest.NewSink()
			e.AttachAndStart(s, func() {}) // rounds are driven by hand
			const count = 3*rxRingEntries + 5
			require.NoError(t, unix.SetsockoptInt(peers[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20))
			want := ringPackets(t, peers[0], count, int(DefaultMTU))
			n, again, err := q.roundLocked(uintptr(queueFD(q)))
			require.NoError(t, err)
			require.Equal(t, count, n)
			require.False(t, again, "the queue ran empty")
			requireDelivered(t, s, want)
			st := e.LinkStats()
			require.Equal(t, uint64(count), st.RXPackets)
			require.Zero(t, st.RXErrors)
			if tc.noRing || tc.refused {
				require.Equal(t, uint64(count+1), st.RXSyscalls, "one read each, and one that finds the queue empty")
			} else {
				// One read(2), then trips of 2, 4, ..., 64, 64, ...
				require.Less(t, st.RXSyscalls, uint64(12), "trips")
				require.Equal(t, count, q.rxTrip, "the next round's first trip asks for what this one read")
			}
		})
	}
}

// TestTunRXRingTrips: a queue that receives one packet at a time reads it
// with read(2), as without the ring, and a round whose first packet is a
// pushed TCP segment ends after it; a round after a busy one starts with
// a trip as large as what that one read, and ends with the trip that finds
// the queue empty, without another read.
func TestTunRXRingTrips(t *testing.T) {
	e, q, s, fd, peer := ringEndpoint(t, &Options{NoGRO: true})
	syscalls := func() uint64 { return e.LinkStats().RXSyscalls }

	// A lone pushed segment: one read(2), and the round ends at it.
	p := tcp4Segment([]byte("request"), 1, 7)
	header.TCP(p[header.IPv4MinimumSize:]).SetFlags(uint8(header.TCPFlagAck | header.TCPFlagPsh))
	_, err := unix.Write(peer, p)
	require.NoError(t, err)
	var pushEnd bool
	n, again, err := q.pushRoundLocked(fd, &pushEnd)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.True(t, again)
	require.True(t, pushEnd, "the round ended at the pushed segment")
	require.Equal(t, uint64(1), syscalls())
	requireDelivered(t, s, [][]byte{p})

	// A busy round, then a round of fewer packets than the first trip
	// asks for: one trip, which finds the queue empty.
	want := ringPackets(t, peer, 40, 200)
	n, _, err = q.roundLocked(fd)
	require.NoError(t, err)
	require.Equal(t, 40, n)
	require.Equal(t, 40, q.rxTrip)
	before := syscalls()
	want = append(want, ringPackets(t, peer, 7, 200)...)
	n, again, err = q.roundLocked(fd)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	require.False(t, again)
	require.Equal(t, before+1, syscalls(), "one trip for the round")
	requireDelivered(t, s, append([][]byte{p}, want...))
}

// TestTunRXRingGrowsSlots: a packet larger than the ring's slots (the
// device's MTU raised behind the endpoint's back) is lost and counted, and
// the slots grow so that the next ones arrive whole.
func TestTunRXRingGrowsSlots(t *testing.T) {
	e, q, s, fd, peer := ringEndpoint(t, &Options{NoGRO: true, MTU: MinMTU})
	slot, slots := q.rxSlot, q.rxSlots
	require.Equal(t, rxSlotFor(int(MinMTU)), slot)
	// One read(2), a trip of two, then a trip of four whose first read
	// finds the large packet.
	small := ringPackets(t, peer, 3, 100)
	_, err := unix.Write(peer, tcp4Packet(make([]byte, 2000), 9))
	require.NoError(t, err)
	n, again, err := q.roundLocked(fd)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, again)
	require.Equal(t, uint64(1), e.LinkStats().RXErrors, "the cut packet counted")
	// A socket's read says only that the slot was full (a TUN's, how
	// large the packet was): the slots double, fewer in the same slab.
	require.Equal(t, 2*slot, q.rxSlot)
	require.Less(t, q.rxSlots, slots)
	requireDelivered(t, s, small)

	want := append([][]byte(nil), small...)
	for range 2 {
		p := tcp4Packet(make([]byte, 2000), 9)
		_, err := unix.Write(peer, p)
		require.NoError(t, err)
		want = append(want, p)
	}
	q.beginRound()
	n, again, err, ok := q.readRing(fd, q.landing(), 3)
	q.endRound()
	require.True(t, ok)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.False(t, again)
	requireDelivered(t, s, want)
	require.Equal(t, uint64(1), e.LinkStats().RXErrors)
}

// ringEndpoint builds an endpoint of one queue with a receive ring over a
// socketpair, attached to a sink, with rounds driven by hand; it returns
// the queue, its descriptor and the peer's end. It skips the test where
// the kernel offers no io_uring, and fails it where the kernel does but
// the queue has no ring (requireRing).
func ringEndpoint(t *testing.T, o *Options) (*Endpoint, *queue, *linktest.Sink, uintptr, int) {
	t.Helper()
	e, peers := pairEndpoint(t, 1, Offloads{}, o)
	q := e.queues[0]
	requireRing(t, q.rxRing != nil)
	s := linktest.NewSink()
	e.AttachAndStart(s, func() {})
	return e, q, s, uintptr(queueFD(q)), peers[0]
}

// queueFD returns the queue's descriptor, for driving rounds by hand.
func queueFD(q *queue) int {
	var fd int
	q.rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// BenchmarkTunReceive measures receive rounds over a socketpair (a
// stand-in for the device, whose own cost differs), as the receive
// goroutine runs them: a lone pushed segment (request and response
// traffic, where a round ends at it), and rounds of 64 MTU-sized
// segments, with the virtio-net header and without, read with read(2)
// each or through the ring. ns/pkt counts the rounds only, not the peer's
// writes.
func BenchmarkTunReceive(b *testing.B) {
	for _, tc := range []struct {
		name  string
		off   Offloads
		opts  Options
		batch int
	}{
		{"vnet/1", fullOffloads, Options{}, 1},
		{"vnet/64", fullOffloads, Options{}, 64},
		{"plain/1", Offloads{}, Options{}, 1},
		{"plain-read/64", Offloads{}, Options{NoRXRing: true}, 64},
		{"plain-ring/64", Offloads{}, Options{}, 64},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e, peers := pairEndpoint(b, 1, tc.off, &tc.opts)
			require.NoError(b, unix.SetsockoptInt(peers[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20))
			c := &linktest.Counter{}
			e.AttachAndStart(c, func() {}) // rounds are driven by hand
			q := e.queues[0]
			if tc.name == "plain-ring/64" {
				requireRing(b, q.rxRing != nil)
			}
			fd := uintptr(queueFD(q))
			p := tcp4Packet(make([]byte, DefaultMTU-header.IPv4MinimumSize-header.TCPMinimumSize), 1)
			if tc.batch == 1 {
				p = tcp4Segment([]byte("request"), 1, 7)
				header.TCP(p[header.IPv4MinimumSize:]).SetFlags(uint8(header.TCPFlagAck | header.TCPFlagPsh))
			}
			f := p
			if tc.off.VNetHeader {
				f = frame(vnet.Header{Flags: vnet.FlagDataValid}, p)
			}
			b.ReportAllocs()
			b.SetBytes(int64(tc.batch * len(p)))
			var in time.Duration
			syscalls := e.LinkStats().RXSyscalls
			for b.Loop() {
				for range tc.batch {
					if _, err := unix.Write(peers[0], f); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				for got := 0; got < tc.batch; {
					var pushEnd bool
					n, _, err := q.pushRoundLocked(fd, &pushEnd)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
				in += time.Since(start)
			}
			pkts := float64(b.N * tc.batch)
			b.ReportMetric(float64(in.Nanoseconds())/pkts, "ns/pkt")
			b.ReportMetric(float64(e.LinkStats().RXSyscalls-syscalls)/pkts, "syscalls/pkt")
		})
	}
}
