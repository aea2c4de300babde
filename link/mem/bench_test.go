package mem

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/linktest"
)

// BenchmarkPair measures one writer pushing packets through the pair to a
// counting receiver: per-packet calls against batched calls, which is what
// bulk transmit saves on a link whose calls cost (-mem-tx-cost).
func BenchmarkPair(b *testing.B) {
	for _, cost := range []TXCost{{}, {Call: time.Microsecond}} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("cost=%v/batch=%d", cost.Call, batch), func(b *testing.B) {
				benchPair(b, batch, cost)
			})
		}
	}
}

func benchPair(b *testing.B, batch int, cost TXCost) {
	o := DefaultOptions()
	o.TXCost = cost
	a, r, err := Pair(&o)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	defer r.Close()
	sink := &linktest.Counter{}
	r.Attach(sink)
	pkts := make([]*stack.PacketBuffer, batch)
	for i := range pkts {
		pkts[i] = packet(uint32(i), 120)
	}
	defer func() {
		for _, p := range pkts {
			p.DecRef()
		}
	}()
	// suffix[i] lists pkts[i:], built once: a partial write is retried
	// with the rest, and the harness itself never allocates in the loop.
	suffix := make([]stack.PacketBufferList, batch)
	for i := range suffix {
		for _, p := range pkts[i:] {
			suffix[i].PushBack(p)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(batch * 120))
	start := time.Now()
	for b.Loop() {
		for sent := 0; sent < batch; {
			n, _ := a.WritePackets(suffix[sent])
			sent += n
			if n == 0 {
				runtime.Gosched()
			}
		}
	}
	want := uint64(b.N * batch)
	for sink.Count() < want {
		time.Sleep(10 * time.Microsecond)
	}
	el := time.Since(start)
	b.ReportMetric(float64(want)/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(el.Nanoseconds())/float64(want), "ns/pkt")
}

// TestSteadyStateAllocs counts heap allocations per packet on the link's
// own path (write, ring, delivery) with a counting receiver. gVisor makes
// the inbound PacketBuffer; the goal for our part is none.
func TestSteadyStateAllocs(t *testing.T) {
	a, r := pair(t, nil)
	sink := &linktest.Counter{}
	r.Attach(sink)
	pkt := packet(1, 120)
	defer pkt.DecRef()
	var sent uint64
	var l stack.PacketBufferList
	l.PushBack(pkt)
	allocs := testing.AllocsPerRun(1000, func() {
		for {
			if n, _ := a.WritePackets(l); n == 1 {
				break
			}
		}
		sent++
		for sink.Count() < sent {
			runtime.Gosched()
		}
	})
	t.Logf("allocations per packet: %.2f", allocs)
	if allocs > 0 {
		t.Errorf("mem link allocates %.2f times per packet; want 0", allocs)
	}
}
