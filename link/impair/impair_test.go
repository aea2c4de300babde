package impair_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	addrA = netip.MustParseAddr("198.18.3.1")
	addrB = netip.MustParseAddr("198.18.3.2")
)

// hosts builds two stacks over a mem pair whose A side is wrapped.
func hosts(t *testing.T, opts impair.Options, mo *mem.Options, qdisc string) (a, b *stack.Stack, wrapped *impair.Endpoint) {
	t.Helper()
	la, lb, err := mem.Pair(mo)
	require.NoError(t, err)
	w, err := impair.Wrap(la, &opts)
	require.NoError(t, err)
	fast := stack.DefaultTCPOptions()
	fast.MinRTO = 10 * time.Millisecond
	for _, h := range []struct {
		st   **stack.Stack
		ep   gstack.LinkEndpoint
		addr netip.Addr
	}{{&a, w, addrA}, {&b, lb, addrB}} {
		s, err := stack.New(&stack.Options{TCP: &fast})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		*h.st = s
		id, err := s.AddNIC(h.ep, &stack.NICOptions{Qdisc: qdisc})
		require.NoError(t, err)
		require.NoError(t, s.AddAddress(id, netip.PrefixFrom(h.addr, 24)))
	}
	return a, b, w
}

func transfer(t *testing.T, a, b *stack.Stack, size int64) {
	t.Helper()
	ln, err := b.ListenTCP(netip.AddrPortFrom(addrB, 80))
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- [32]byte{}
			return
		}
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		got <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := a.DialTCP(ctx, netip.AddrPortFrom(addrB, 80))
	require.NoError(t, err)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>10)
	}
	_, err = c.Write(data)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	select {
	case s := <-got:
		require.Equal(t, sha256.Sum256(data), s, "the bytes arrived intact")
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
}

// TestTCPIntactThroughEveryFault wraps one side with every impairment in
// both directions (checksums on, so corruption is caught) and checks a
// transfer arrives intact, for each qdisc.
func TestTCPIntactThroughEveryFault(t *testing.T) {
	mo := mem.DefaultOptions()
	mo.ChecksumOffload = false
	for _, q := range sched.Names() {
		t.Run(q, func(t *testing.T) {
			opts := impair.Options{
				RX: link.Impairments{Loss: 0.03, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01, Delay: 100 * time.Microsecond, Seed: 1},
				TX: link.Impairments{Loss: 0.03, Duplicate: 0.02, Reorder: 0.02, Seed: 2},
			}
			a, b, w := hosts(t, opts, &mo, q)
			transfer(t, a, b, 2<<20)
			st := w.LinkStats()
			require.Positive(t, st.ImpairLost)
			require.Positive(t, st.ImpairDuplicated)
			require.Positive(t, st.ImpairReordered)
			require.Positive(t, st.ImpairCorrupted)
			require.Positive(t, st.ImpairDelayed)
		})
	}
}

func TestCorruptionDroppedWhenStackWouldNotCheck(t *testing.T) {
	// With checksum offload the stack verifies nothing: the wrapper drops
	// a corrupted packet instead of delivering it.
	opts := impair.Options{RX: link.Impairments{Corrupt: 0.2, Seed: 3}}
	a, b, w := hosts(t, opts, nil, sched.None)
	transfer(t, a, b, 1<<20)
	rx, _ := w.Counts()
	require.Positive(t, rx.CorruptDropped)
	require.Zero(t, rx.Corrupted)
}

func TestUDPLossRate(t *testing.T) {
	opts := impair.Options{TX: link.Impairments{Loss: 0.25, Seed: 9}}
	a, b, _ := hosts(t, opts, nil, sched.None)
	srv, err := b.ListenUDP(netip.AddrPortFrom(addrB, 9))
	require.NoError(t, err)
	defer srv.Close()
	c, err := a.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(addrB, 9))
	require.NoError(t, err)
	defer c.Close()
	const n = 2000
	// Read while sending, so the receive buffer never overflows: only the
	// injected loss may take datagrams.
	counted := make(chan int)
	go func() {
		got := 0
		buf := make([]byte, 16)
		for {
			srv.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := srv.ReadFrom(buf); err != nil {
				counted <- got
				return
			}
			got++
		}
	}()
	for range n {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
		time.Sleep(10 * time.Microsecond)
	}
	got := <-counted
	require.InDelta(t, 0.75*n, got, 0.05*n, "a quarter lost")
}

func TestBadOptions(t *testing.T) {
	la, lb, err := mem.Pair(nil)
	require.NoError(t, err)
	defer la.Close()
	defer lb.Close()
	_, err = impair.Wrap(la, &impair.Options{TX: link.Impairments{Corrupt: 0.1}})
	require.ErrorContains(t, err, "received packets only")
	_, err = impair.Wrap(la, &impair.Options{RX: link.Impairments{Loss: 2}})
	require.Error(t, err)
	_, err = impair.Wrap(nil, &impair.Options{})
	require.Error(t, err)
	w, err := impair.Wrap(la, &impair.Options{})
	require.NoError(t, err)
	w.Close()
	w.Close()
}

// numbered returns an IPv4-numbered payload of size bytes carrying seq.
func numbered(seq uint32, size int) []byte {
	data := make([]byte, max(size, 8))
	data[0] = 0x45
	binary.BigEndian.PutUint32(data[4:], seq)
	return data
}

func seqOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[4:]) }

// wrapped returns a test endpoint wrapped with opts and attached to a
// sink; both are closed when the test ends.
func wrapped(t *testing.T, lower gstack.LinkEndpoint, opts impair.Options) (*impair.Endpoint, *linktest.Sink) {
	t.Helper()
	w, err := impair.Wrap(lower, &opts)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	s := linktest.NewSink()
	w.Attach(s)
	return w, s
}

// send writes packets with seqs from..to-1 through w, one call each, and
// returns how many it took.
func send(t *testing.T, w *impair.Endpoint, from, to uint32) int {
	t.Helper()
	taken := 0
	for i := from; i < to; i++ {
		pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(numbered(i, 64))})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		var l gstack.PacketBufferList
		l.PushBack(pkt)
		n, _ := w.WritePackets(l)
		taken += n
		pkt.DecRef()
	}
	return taken
}

func seqs(pkts []linktest.Packet) []uint32 {
	var out []uint32
	for _, p := range pkts {
		out = append(out, seqOf(p.Data))
	}
	return out
}

// TestReceiveFaults checks each fault at probability 1 on received
// packets, where the outcome does not depend on the random draw.
func TestReceiveFaults(t *testing.T) {
	const total = 100
	for _, tc := range []struct {
		name  string
		im    link.Impairments
		want  func(i int) uint32 // the i-th delivered seq
		count int
	}{
		{"loss all", link.Impairments{Loss: 1}, nil, 0},
		{"duplicate all", link.Impairments{Duplicate: 1}, func(i int) uint32 { return uint32(i / 2) }, 2 * total},
		// Every other packet is held and delivered after its successor.
		{"reorder all", link.Impairments{Reorder: 1}, func(i int) uint32 { return uint32(i ^ 1) }, total},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lower := linktest.NewEndpoint(nil)
			w, s := wrapped(t, lower, impair.Options{RX: tc.im})
			for i := range uint32(total) {
				require.True(t, lower.Inject(numbered(i, 64)))
			}
			rx, _ := w.Counts()
			require.Len(t, s.Packets(), tc.count)
			for i, seq := range seqs(s.Packets()) {
				require.Equal(t, tc.want(i), seq, "packet %d", i)
			}
			switch {
			case tc.im.Loss > 0:
				require.EqualValues(t, total, rx.Lost)
				require.EqualValues(t, total, w.LinkStats().ImpairLost)
			case tc.im.Duplicate > 0:
				require.EqualValues(t, total, rx.Duplicated)
			case tc.im.Reorder > 0:
				require.EqualValues(t, total/2, rx.Reordered)
			}
		})
	}
}

// TestSendFaults checks the same faults on sent packets: the wrapped
// endpoint sees what survives, and a lost packet still counts as written.
func TestSendFaults(t *testing.T) {
	const total = 100
	for _, tc := range []struct {
		name  string
		im    link.Impairments
		want  func(i int) uint32
		count int
	}{
		{"loss all", link.Impairments{Loss: 1}, nil, 0},
		{"duplicate all", link.Impairments{Duplicate: 1}, func(i int) uint32 { return uint32(i / 2) }, 2 * total},
		{"reorder all", link.Impairments{Reorder: 1}, func(i int) uint32 { return uint32(i ^ 1) }, total},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lower := linktest.NewEndpoint(&linktest.Writer{Keep: true})
			w, _ := wrapped(t, lower, impair.Options{TX: tc.im})
			require.Equal(t, total, send(t, w, 0, total), "the wire took every packet")
			got := lower.Written()
			require.Len(t, got, tc.count)
			for i, p := range got {
				require.Equal(t, tc.want(i), seqOf(p), "packet %d", i)
			}
		})
	}
}

func TestCorruptionFlipsOneBitOfACopy(t *testing.T) {
	lower := linktest.NewEndpoint(nil) // no checksum offload: the stack checks
	w, s := wrapped(t, lower, impair.Options{RX: link.Impairments{Corrupt: 1, Seed: 9}})
	orig := numbered(1, 256)
	require.True(t, lower.Inject(orig))
	got := s.Wait(t, 1)[0].Data
	diff := 0
	for i := range orig {
		for x := orig[i] ^ got[i]; x != 0; x &= x - 1 {
			diff++
		}
	}
	require.Equal(t, 1, diff, "exactly one bit flipped")
	require.Equal(t, numbered(1, 256), orig, "the sender's buffer is untouched")
	rx, _ := w.Counts()
	require.EqualValues(t, 1, rx.Corrupted)
}

func TestSeededLossIsDeterministic(t *testing.T) {
	run := func() []uint32 {
		lower := linktest.NewEndpoint(nil)
		w, err := impair.Wrap(lower, &impair.Options{RX: link.Impairments{Loss: 0.3, Seed: 42}})
		require.NoError(t, err)
		defer w.Close()
		s := linktest.NewSink()
		w.Attach(s)
		for i := range uint32(300) {
			lower.Inject(numbered(i, 64))
		}
		rx, _ := w.Counts()
		require.EqualValues(t, 300, uint64(s.Len())+rx.Lost)
		return seqs(s.Packets())
	}
	first := run()
	require.Less(t, len(first), 300)
	require.Greater(t, len(first), 100)
	require.Equal(t, first, run())
}

// TestJitterNeverReorders: with jitter much larger than the gap between
// packets, both directions still deliver in order, none early, as
// link.Impairments promises.
func TestJitterNeverReorders(t *testing.T) {
	const total = 200
	im := link.Impairments{Delay: time.Millisecond, Jitter: 5 * time.Millisecond, Seed: 1}
	lower := linktest.NewEndpoint(&linktest.Writer{Keep: true})
	w, s := wrapped(t, lower, impair.Options{RX: im, TX: im})
	var injected []time.Time
	for i := range uint32(total) {
		injected = append(injected, time.Now())
		require.True(t, lower.Inject(numbered(i, 64)))
	}
	require.Equal(t, total, send(t, w, 0, total))
	got := s.Wait(t, total)
	for i, p := range got {
		require.Equal(t, uint32(i), seqOf(p.Data), "received packet %d: jitter must not reorder", i)
		// A lower bound, not a speed: the wrapper may never deliver early.
		require.GreaterOrEqual(t, p.At.Sub(injected[i]), im.Delay)
	}
	require.Eventually(t, func() bool { return lower.Taken() == total }, time.Minute, time.Millisecond)
	for i, p := range lower.Written() {
		require.Equal(t, uint32(i), seqOf(p), "sent packet %d: jitter must not reorder", i)
	}
	rx, tx := w.Counts()
	require.EqualValues(t, total, rx.Delayed)
	require.EqualValues(t, total, tx.Delayed)
	require.Zero(t, rx.Dropped.Total()+tx.Dropped.Total())
}

// TestDelayedWriteRefusalsCounted: a delayed sent packet that the wrapped
// endpoint refuses when it falls due has no writer left to retry it; it is
// dropped and counted by reason, in Counts and in the link counters.
func TestDelayedWriteRefusalsCounted(t *testing.T) {
	const total = 10
	for _, tc := range []struct {
		name   string
		writer *linktest.Writer
		got    func(impair.Drops) uint64
		stat   func(link.Stats) uint64
	}{
		{"full", &linktest.Writer{Take: func(int) int { return 0 }},
			func(d impair.Drops) uint64 { return d.Full }, func(s link.Stats) uint64 { return s.TXErrors }},
		{"closed", &linktest.Writer{Fail: &tcpip.ErrClosedForSend{}},
			func(d impair.Drops) uint64 { return d.Closed }, func(s link.Stats) uint64 { return s.TXClosed }},
		{"failed", &linktest.Writer{Fail: &tcpip.ErrAborted{}},
			func(d impair.Drops) uint64 { return d.Failed }, func(s link.Stats) uint64 { return s.TXErrors }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lower := linktest.NewEndpoint(tc.writer)
			w, _ := wrapped(t, lower, impair.Options{TX: link.Impairments{Delay: time.Millisecond}})
			require.Equal(t, total, send(t, w, 0, total), "the wire took them")
			require.Eventually(t, func() bool {
				_, tx := w.Counts()
				return tc.got(tx.Dropped) == total
			}, time.Minute, time.Millisecond)
			_, tx := w.Counts()
			require.EqualValues(t, total, tx.Dropped.Total(), "one reason each")
			require.EqualValues(t, total, tc.stat(w.LinkStats()))
			require.Equal(t, total, lower.Refused(), "each was offered to the wrapped endpoint")
		})
	}
}

// TestCloseCountsWhatItHeld: packets still delayed or held back for
// reordering at Close are released and counted, never lost silently.
func TestCloseCountsWhatItHeld(t *testing.T) {
	lower := linktest.NewEndpoint(nil)
	w, err := impair.Wrap(lower, &impair.Options{
		RX: link.Impairments{Delay: time.Hour},
		TX: link.Impairments{Reorder: 1},
	})
	require.NoError(t, err)
	s := linktest.NewSink()
	w.Attach(s)
	for i := range uint32(3) {
		require.True(t, lower.Inject(numbered(i, 64)))
	}
	require.Equal(t, 1, send(t, w, 0, 1))
	w.Close()
	rx, tx := w.Counts()
	require.EqualValues(t, 3, rx.Dropped.Closed)
	require.EqualValues(t, 1, tx.Dropped.Closed)
	st := w.LinkStats()
	require.EqualValues(t, 3, st.RXClosed)
	require.EqualValues(t, 1, st.TXClosed)
	require.Zero(t, s.Len())
}

// The optional interfaces' pass-through, with and without them on the
// wrapped endpoint, is checked for every wrapper of the tree alike by
// link/internal/optional's TestEveryWrapperIsTransparent.

// TestBusyPollThroughWrapper: a stack with busy polling registers the
// wrapper as a source, and a busy-polled round of the wrapped mem endpoint
// goes through the wrapper's receive faults.
func TestBusyPollThroughWrapper(t *testing.T) {
	la, lb, err := mem.Pair(nil)
	require.NoError(t, err)
	defer la.Close()
	w, s := wrapped(t, lb, impair.Options{RX: link.Impairments{Duplicate: 1}})
	w.BusyPollBegin() // once parked, the receive goroutine stays parked: only polls deliver
	defer w.BusyPollEnd()
	written := 0
	require.Eventually(t, func() bool {
		if lb.Backlog() == 0 {
			pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(numbered(uint32(written), 64))})
			pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
			var l gstack.PacketBufferList
			l.PushBack(pkt)
			n, _ := la.WritePackets(l)
			pkt.DecRef()
			written += n
		}
		w.BusyPoll()
		return w.LinkStats().RXBusyPolled > 0
	}, time.Minute, time.Millisecond, "a busy-poll round through the wrapper delivered")
	got := s.Wait(t, 2*written)
	require.Len(t, got, 2*written, "every packet, polled or not, went through the wrapper's faults")
}

func TestBothWays(t *testing.T) {
	im := link.Impairments{Loss: 0.1, Corrupt: 0.01, Seed: 7}
	o := impair.BothWays(im)
	require.Equal(t, im, o.RX)
	require.Zero(t, o.TX.Corrupt, "corruption applies to received packets only")
	require.Equal(t, im.Loss, o.TX.Loss)
	lower := linktest.NewEndpoint(nil)
	w, err := impair.Wrap(lower, o)
	require.NoError(t, err, "Wrap takes what BothWays gives")
	w.Close()
}

func TestOnReceive(t *testing.T) {
	im := link.Impairments{Loss: 0.1, Delay: time.Millisecond, Seed: 7}
	end0, end1 := impair.OnReceive(im, 0), impair.OnReceive(im, 1)
	require.Equal(t, im, end0.RX)
	require.False(t, end0.TX.Active(), "the other end impairs the other direction on its receive")
	want := im
	want.Seed = 8
	require.Equal(t, want, end1.RX, "the other direction draws another sequence")
}
