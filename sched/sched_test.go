package sched

import (
	"fmt"
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
	o = (&Options{Limit: 5, Queues: 3}).withDefaults()
	require.Equal(t, Options{Limit: 5, Queues: 3}, o)
}

// BenchmarkWritePacket measures N goroutines writing through a discipline
// to a link that takes everything: the cost of admission and dispatch
// alone. The ladder starts with the baselines; each strategy joins it.
func BenchmarkWritePacket(b *testing.B) {
	for _, name := range Names() {
		for _, senders := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/senders=%d", name, senders), func(b *testing.B) {
				d := &discard{}
				q, err := New(name, d, nil)
				if err != nil {
					b.Fatal(err)
				}
				pkt := newPacket()
				b.ReportAllocs()
				start := time.Now()
				var wg sync.WaitGroup
				var accepted atomic.Uint64
				per := b.N/senders + 1
				for range senders {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var ok uint64
						for range per {
							if q.WritePacket(pkt) == nil {
								ok++
							}
						}
						accepted.Add(ok)
					}()
				}
				wg.Wait()
				// fifo sends asynchronously: wait for what it accepted.
				for d.n.Load() < accepted.Load() {
					time.Sleep(10 * time.Microsecond)
				}
				el := time.Since(start)
				q.Close()
				pkt.DecRef()
				b.ReportMetric(float64(d.n.Load())/el.Seconds(), "pkts/s")
				b.ReportMetric(100*float64(uint64(per*senders)-accepted.Load())/float64(per*senders), "drop%")
			})
		}
	}
}
