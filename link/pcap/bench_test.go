package pcap_test

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/pcap"
)

// batch returns a list of n sent packets of size bytes and a function
// that drops their references.
func batch(n, size int) (gstack.PacketBufferList, func()) {
	var l gstack.PacketBufferList
	for i := range n {
		l.PushBack(outgoing(ipPacket(false, uint16(i), size), header.IPv4MinimumSize))
	}
	return l, func() {
		for _, p := range l.AsSlice() {
			p.DecRef()
		}
	}
}

// TestCaptureAllocatesNothing: capturing a sent batch copies into the
// capture's own buffer and allocates nothing on the data path.
func TestCaptureAllocatesNothing(t *testing.T) {
	ep, err := pcap.New(linktest.NewEndpoint(nil), io.Discard, nil)
	require.NoError(t, err)
	defer ep.Close()
	l, release := batch(64, 1500)
	defer release()
	allocs := testing.AllocsPerRun(100, func() { ep.WritePackets(l) })
	require.Zero(t, allocs)
	require.Positive(t, ep.Counts().Packets+ep.Counts().Dropped)
}

// BenchmarkWritePackets is the cost of capturing on the send path: a
// batch of 64 packets written to a link that takes them and keeps
// nothing, bare and through a capture writing to io.Discard, for small
// and full-sized packets. Every 16 batches (1.5 MB of full-sized records,
// less than the default buffer) the timer stops until the writer has
// drained them, so that what is measured is the data path's copy, not
// the drops of a producer faster than any link (dropped/pkt says 0).
func BenchmarkWritePackets(b *testing.B) {
	const batchLen, drainEvery = 64, 16
	for _, size := range []int{100, 1500} {
		for _, capture := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/capture=%v", size, capture), func(b *testing.B) {
				var ep gstack.LinkEndpoint = linktest.NewEndpoint(nil)
				var w *pcap.Endpoint
				if capture {
					var err error
					if w, err = pcap.New(ep, io.Discard, nil); err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					ep = w
				}
				l, release := batch(batchLen, size)
				defer release()
				b.ReportAllocs()
				b.SetBytes(int64(batchLen * size))
				written := 0
				for b.Loop() {
					ep.WritePackets(l)
					if written += batchLen; w != nil && written%(drainEvery*batchLen) == 0 {
						b.StopTimer()
						drained(b, w, written)
						b.StartTimer()
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(written), "ns/pkt")
				if w != nil {
					drained(b, w, written)
					c := w.Counts()
					b.ReportMetric(float64(c.Dropped)/float64(written), "dropped/pkt")
				}
			})
		}
	}
}

// drained waits until the capture accounted for n packets.
func drained(b *testing.B, w *pcap.Endpoint, n int) {
	deadline := time.Now().Add(linktest.WaitTimeout)
	for c := w.Counts(); c.Packets+c.Dropped+c.Lost < uint64(n); c = w.Counts() {
		if time.Now().After(deadline) {
			b.Fatalf("the capture accounted for %d of %d packets after %v", c.Packets+c.Dropped+c.Lost, n, linktest.WaitTimeout)
		}
		runtime.Gosched()
	}
}
