package mem

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link/linktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// packet builds an IPv4-numbered packet whose payload carries seq.
func packet(seq uint32, size int) *stack.PacketBuffer {
	data := make([]byte, max(size, 8))
	data[0] = 0x45
	binary.BigEndian.PutUint32(data[4:], seq)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(data)})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

// write writes the packets with seqs from..to-1 in one call and returns
// how many the link took. The caller's references are released.
func write(e *Endpoint, from, to uint32) (int, tcpip.Error) {
	var l stack.PacketBufferList
	for i := from; i < to; i++ {
		l.PushBack(packet(i, 64))
	}
	n, err := e.WritePackets(l)
	l.DecRef()
	return n, err
}

func seqOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[4:]) }

func pair(t *testing.T, o *Options) (*Endpoint, *Endpoint) {
	t.Helper()
	a, b, err := Pair(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

func TestBackpressureNotDrop(t *testing.T) {
	o := DefaultOptions()
	o.RingSize = 4
	a, b := pair(t, &o)
	// b is not attached, so nothing drains the ring.
	n, err := write(a, 0, 6)
	require.Equal(t, 4, n)
	require.IsType(t, &tcpip.ErrNoBufferSpace{}, err)
	st := a.LinkStats()
	require.Equal(t, uint64(4), st.TXPackets)
	require.Equal(t, uint64(2), st.TXFull)
	require.Equal(t, uint64(1), st.TXCalls)
	require.Equal(t, 4, b.Backlog())

	s := linktest.NewSink()
	b.Attach(s)
	got := s.Wait(t, 4)
	for i, p := range got {
		require.Equal(t, uint32(i), seqOf(p.Data))
	}
	// The refused two are the writer's to retry.
	n, err = write(a, 4, 6)
	require.Equal(t, 2, n)
	require.Nil(t, err)
	s.Wait(t, 6)
	require.Equal(t, uint64(6), b.LinkStats().RXPackets)
}

func TestOrderAndBatching(t *testing.T) {
	a, b := pair(t, nil)
	s := linktest.NewSink()
	b.Attach(s)
	const total = 5000
	for i := uint32(0); i < total; {
		n, _ := write(a, i, min(i+32, total))
		i += uint32(n)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	got := s.Wait(t, total)
	for i, p := range got {
		require.Equal(t, uint32(i), seqOf(p.Data))
	}
	st := b.LinkStats()
	require.Equal(t, uint64(total), st.RXPackets)
	require.LessOrEqual(t, st.RXRounds, uint64(total))
	require.GreaterOrEqual(t, st.RXRounds, uint64(total/DefaultBatchSize))
}

func TestConcurrentWritersConserveAndOrder(t *testing.T) {
	o := DefaultOptions()
	o.RingSize = 16
	o.BatchSize = 4
	a, b := pair(t, &o)
	s := linktest.NewSink()
	b.Attach(s)
	const writers, each = 8, 2000
	var wg sync.WaitGroup
	refused := 0
	var mu sync.Mutex
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := uint32(w) << 24
			for i := uint32(0); i < each; {
				n, err := write(a, base+i, base+min(i+3, each))
				i += uint32(n)
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					time.Sleep(10 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	got := s.Wait(t, writers*each)
	next := make(map[uint32]uint32)
	for _, p := range got {
		seq := seqOf(p.Data)
		w, i := seq>>24, seq&0xffffff
		require.Equal(t, next[w], i, "writer %d out of order", w)
		next[w] = i + 1
	}
	as, bs := a.LinkStats(), b.LinkStats()
	require.Equal(t, uint64(writers*each), as.TXPackets)
	require.Equal(t, as.TXPackets, bs.RXPackets)
	require.Positive(t, refused, "a 16-packet ring must have pushed back")
	require.Positive(t, as.TXFull)
}

func TestCloseReleasesAndRefuses(t *testing.T) {
	a, b := pair(t, nil)
	n, err := write(a, 0, 3)
	require.Equal(t, 3, n)
	require.Nil(t, err)
	b.Close()
	require.Equal(t, uint64(3), b.LinkStats().RXClosed)
	n, err = write(a, 3, 5)
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	require.Equal(t, uint64(2), a.LinkStats().TXClosed)
	// b's own writes fail too.
	n, err = write(b, 0, 1)
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	b.Close() // idempotent
}

func TestCloseRunsActionOnce(t *testing.T) {
	a, _ := pair(t, nil)
	calls := 0
	a.SetOnCloseAction(func() {
		calls++
		a.Close() // gVisor's RemoveNIC closes the endpoint again
	})
	a.Attach(linktest.NewSink())
	a.Close()
	a.Close()
	require.Equal(t, 1, calls)
	require.False(t, a.IsAttached())
}

func TestDetachedCounts(t *testing.T) {
	a, b := pair(t, nil)
	s := linktest.NewSink()
	b.Attach(s)
	write(a, 0, 1)
	s.Wait(t, 1)
	b.Attach(nil)
	write(a, 1, 3)
	require.Eventually(t, func() bool { return b.LinkStats().RXDetached == 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, s.Len())
}

func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"mtu too small", func(o *Options) { o.MTU = 500 }, "MTU"},
		{"mtu too large", func(o *Options) { o.MTU = 70000 }, "MTU"},
		{"negative ring", func(o *Options) { o.RingSize = -1 }, "ring"},
		{"negative batch", func(o *Options) { o.BatchSize = -1 }, "batch"},
		{"gso without offload", func(o *Options) { o.GSO = true; o.ChecksumOffload = false }, "checksum offload"},
		{"negative cost", func(o *Options) { o.TXCost.Call = -1 }, "TX cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mod(&o)
			_, _, err := Pair(&o)
			require.ErrorContains(t, err, tc.want)
		})
	}
	a, b, err := Pair(&Options{MTU: 9000})
	require.NoError(t, err)
	require.Equal(t, uint32(9000), a.MTU())
	require.Zero(t, a.Capabilities(), "booleans in a non-nil Options are taken as given")
	a.Close()
	b.Close()
}

func TestParseTXCost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want TXCost
		err  bool
	}{
		{"2us,100ns", TXCost{2 * time.Microsecond, 100 * time.Nanosecond}, false},
		{"1ms", TXCost{Call: time.Millisecond}, false},
		{" 0 , 0 ", TXCost{}, false},
		{"2us,", TXCost{}, true},
		{"fast", TXCost{}, true},
		{"-1us,0", TXCost{}, true},
	} {
		got, err := ParseTXCost(tc.in)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		again, err := ParseTXCost(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "String round-trips")
	}
}

func TestTXCostIsCharged(t *testing.T) {
	// The cost is charged to the writer; assert the mechanism ran (a lower
	// bound), not how fast anything is.
	o := DefaultOptions()
	o.TXCost = TXCost{Call: 2 * time.Millisecond}
	a, _ := pair(t, &o)
	start := time.Now()
	write(a, 0, 1)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Millisecond)
}

// FuzzParseTXCost: no input panics the parser, and what it accepts is
// never negative and reads back the same from its String.
func FuzzParseTXCost(f *testing.F) {
	for _, s := range []string{"0,0", "2us,100ns", "1ms", "-1us,0", "1us,", ",", "1h,1h", "5us, 10ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseTXCost(s)
		if err != nil {
			return
		}
		if c.Call < 0 || c.Packet < 0 {
			t.Fatalf("ParseTXCost(%q) accepted a negative cost %+v", s, c)
		}
		back, err := ParseTXCost(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseTXCost(%q) = %+v, whose String %q reads back as %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// roundSink records whether each delivery happened inside a round.
type roundSink struct {
	*linktest.Sink
	open, outside atomic.Int64
}

func (s *roundSink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if s.open.Load() != 1 {
		s.outside.Add(1)
	}
	s.Sink.DeliverNetworkPacket(proto, pkt)
}

func TestRoundsWrapDeliveries(t *testing.T) {
	a, b := pair(t, nil)
	s := &roundSink{Sink: linktest.NewSink()}
	var begins, ends atomic.Int64
	b.NotifyRounds(func() { begins.Add(1); s.open.Add(1) }, func() { ends.Add(1); s.open.Add(-1) })
	b.Attach(s)
	const total = 500
	for i := uint32(0); i < total; {
		n, _ := write(a, i, min(i+16, total))
		i += uint32(n)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	s.Wait(t, total)
	require.Eventually(t, func() bool { return ends.Load() == begins.Load() }, 10*time.Second, time.Millisecond)
	require.Zero(t, s.outside.Load(), "deliveries outside a round")
	require.Positive(t, begins.Load())
	require.LessOrEqual(t, begins.Load(), int64(b.LinkStats().RXRounds))

	// Unregistered, rounds cost nothing and call nothing.
	b.NotifyRounds(nil, nil)
	before := begins.Load()
	n, err := write(a, total, total+8)
	require.Equal(t, 8, n)
	require.Nil(t, err)
	s.Wait(t, total+8)
	require.Equal(t, before, begins.Load())
}
