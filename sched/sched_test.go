package sched

import (
	"fmt"
	"runtime"
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
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// discard is a LinkWriter that takes every packet and counts it.
type discard struct{ n atomic.Uint64 }

func (d *discard) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	d.n.Add(uint64(pkts.Len()))
	return pkts.Len(), nil
}

func newPacket() *stack.PacketBuffer {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, 120))})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

func TestRegistry(t *testing.T) {
	require.Equal(t, []string{None, FIFO}, Names()[:2], "baselines first")
	for _, name := range Names() {
		require.True(t, Known(name))
		require.NotEmpty(t, Describe(name))
		d := &discard{}
		q, err := New(name, d, nil)
		require.NoError(t, err)
		pkt := newPacket()
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
		require.Eventually(t, func() bool { return d.n.Load() == 1 }, 10*time.Second, time.Millisecond)
		q.Close()
	}
	_, err := New("red", &discard{}, nil)
	var unknown *UnknownError
	require.ErrorAs(t, err, &unknown)
	require.ErrorContains(t, err, "none, fifo")
	_, err = New(FIFO, nil, nil)
	require.Error(t, err)
	require.False(t, Known("red"))
}

func TestOptionsDefaults(t *testing.T) {
	o := (*Options)(nil).withDefaults()
	require.Equal(t, DefaultLimit, o.Limit)
	require.Positive(t, o.Queues)
	require.Equal(t, DefaultQuota, o.Quota)
	require.Equal(t, DefaultBatch, o.Batch)
	require.Equal(t, DefaultMaxBurst, o.MaxBurst)
	require.Equal(t, DefaultRetryInterval, o.RetryInterval)
	o = (&Options{Limit: 5, Queues: 3, Quota: 7, Batch: 2, MaxBurst: 9, RetryInterval: time.Second}).withDefaults()
	require.Equal(t, Options{Limit: 5, Queues: 3, Quota: 7, Batch: 2, MaxBurst: 9, RetryInterval: time.Second}, o)
}

// costly is a link whose every call and packet costs busy time, like a
// syscall-bound device: the -mem-tx-cost of ustack bench.
type costly struct {
	discard
	call, packet time.Duration
}

func (c *costly) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	d := c.call + time.Duration(pkts.Len())*c.packet
	for start := time.Now(); time.Since(start) < d; {
	}
	return c.discard.WritePackets(pkts)
}

// BenchmarkWritePacket measures N goroutines writing through a discipline
// to a link that takes everything, free or costed (2us per call plus 100ns
// per packet): the cost of admission and dispatch alone, with no stack on
// top. The ladder puts gVisor's baselines first, then each strategy.
func BenchmarkWritePacket(b *testing.B) {
	for _, link := range []string{"free", "costed"} {
		for _, name := range Names() {
			for _, senders := range []int{1, 4, 16, 64, 256} {
				b.Run(fmt.Sprintf("link=%s/%s/senders=%d", link, name, senders), func(b *testing.B) {
					var lower interface {
						stack.LinkWriter
						count() uint64
					} = &discard{}
					if link == "costed" {
						lower = &costly{call: 2 * time.Microsecond, packet: 100 * time.Nanosecond}
					}
					benchWritePacket(b, name, lower, senders)
				})
			}
		}
	}
}

func (d *discard) count() uint64 { return d.n.Load() }

// BenchmarkProfileOverhead pairs each strategy with its profile (lock
// contention and latency histogram) on and off, on a free link, where the
// profile's share is largest.
func BenchmarkProfileOverhead(b *testing.B) {
	for _, name := range []string{RootLock, BusyLock, EnqLock, LList} {
		for _, senders := range []int{1, 64} {
			for _, off := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/senders=%d/profile=%v", name, senders, !off), func(b *testing.B) {
					benchWritePacketOpts(b, name, &discard{}, senders, &Options{NoProfile: off})
				})
			}
		}
	}
}

// BenchmarkHandOff pairs each strategy with Options.HandOff off (bypass)
// and on, on the costed link, where handing the write to the background
// goroutine frees the writer: its ns/pkt is what a writer pays.
func BenchmarkHandOff(b *testing.B) {
	for _, name := range []string{RootLock, BusyLock, EnqLock, LList} {
		for _, senders := range []int{1, 64} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/senders=%d/handoff=%v", name, senders, on), func(b *testing.B) {
					lower := &costly{call: 2 * time.Microsecond, packet: 100 * time.Nanosecond}
					benchWritePacketOpts(b, name, lower, senders, &Options{HandOff: on})
				})
			}
		}
	}
}

func benchWritePacket(b *testing.B, name string, lower interface {
	stack.LinkWriter
	count() uint64
}, senders int) {
	benchWritePacketOpts(b, name, lower, senders, nil)
}

func benchWritePacketOpts(b *testing.B, name string, lower interface {
	stack.LinkWriter
	count() uint64
}, senders int, opts *Options) {
	q, err := New(name, lower, opts)
	if err != nil {
		b.Fatal(err)
	}
	pkt := newPacket()
	b.ReportAllocs()
	var wg sync.WaitGroup
	var accepted atomic.Uint64
	per := max(b.N/senders, 1)
	b.ResetTimer()
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ok uint64
			for range per {
				if q.WritePacket(pkt) == nil {
					ok++
				} else {
					// Refused (ENOBUFS): yield before the next packet, as
					// ustack bench's senders do, rather than storm.
					runtime.Gosched()
				}
			}
			accepted.Add(ok)
		}()
	}
	wg.Wait()
	// Wait for what the discipline still holds: ours account for every
	// accepted packet (sent, dropped or queued); gVisor's fifo drops
	// nothing on a link that takes everything.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Microsecond) {
		if r, ok := q.(Reporter); ok {
			if s := r.QdiscStats(); s.Backlog == 0 && s.Enqueued == s.Sent+s.Dropped.Total() {
				break
			}
		} else if lower.count() >= accepted.Load() {
			break
		}
	}
	el := time.Since(start)
	b.StopTimer()
	q.Close()
	pkt.DecRef()
	offered := float64(per * senders)
	b.ReportMetric(float64(lower.count())/el.Seconds(), "pkts/s")
	b.ReportMetric(100*(offered-float64(accepted.Load()))/offered, "refused%")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(el.Nanoseconds())/offered, "ns/pkt")
}
