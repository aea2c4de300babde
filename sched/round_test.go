package sched

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// roundLink is a recorder that delivers in receive rounds: it keeps the
// hooks a discipline registers through RoundNotifier, which the test then
// calls as a link's receive goroutine would.
type roundLink struct {
	*recorder
	begin, end func()
}

func (l *roundLink) NotifyRounds(begin, end func()) { l.begin, l.end = begin, end }

func newRoundLink() *roundLink { return &roundLink{recorder: newRecorder()} }

// write writes one packet of flow and requires it accepted.
func write(t *testing.T, q *Qdisc, flow, seq uint32) {
	t.Helper()
	pkt := flowPacket(flow, seq)
	defer pkt.DecRef()
	require.Nil(t, q.WritePacket(pkt))
}

func TestRoundDefersToOneFlush(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			l := newRoundLink()
			q := newOurs(t, name, l, nil)
			defer q.Close()
			require.NotNil(t, l.begin, "New registers with a RoundNotifier link")
			l.begin()
			for i := range 10 {
				write(t, q, 1, uint32(i))
			}
			require.Zero(t, l.received(), "nothing leaves before the round ends")
			l.end()
			s := requireConserved(t, q, l.recorder)
			require.Equal(t, uint64(10), s.Sent)
			require.Equal(t, uint64(1), s.Batches, "the round's packets leave in one write")
			require.Equal(t, uint64(1), s.Rounds)
			require.Equal(t, uint64(1), s.RoundFlushes)
			require.Zero(t, s.Bypassed)
		})
	}
}

func TestRoundFlushesAtBatch(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			l := newRoundLink()
			q := newOurs(t, name, l, &Options{Batch: 4})
			defer q.Close()
			l.begin()
			for i := range 4 {
				write(t, q, 1, uint32(i))
			}
			require.Equal(t, 4, l.received(), "a full batch leaves at once, not at the round's end")
			for i := 4; i < 10; i++ {
				write(t, q, 1, uint32(i))
			}
			l.end()
			s := requireConserved(t, q, l.recorder)
			require.Equal(t, uint64(10), s.Sent)
			require.Equal(t, uint64(1), s.RoundFlushes)
		})
	}
}

func TestEmptyRoundReleasesToken(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			l := newRoundLink()
			q := newOurs(t, name, l, nil)
			defer q.Close()
			l.begin()
			l.end()
			write(t, q, 1, 0)
			s := requireConserved(t, q, l.recorder)
			require.Equal(t, uint64(1), s.Bypassed, "an idle queue after the round bypasses")
			require.Equal(t, uint64(1), s.Rounds)
			require.Zero(t, s.RoundFlushes, "an empty round flushes nothing")
		})
	}
}

// TestRoundLeavesRunnerAlone: a round that begins while a runner is at
// work does not take the token, and its packets go with the runner's.
func TestRoundLeavesRunnerAlone(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r, started, release := blockedLink()
			l := &roundLink{recorder: r}
			q := newOurs(t, name, l, nil)
			defer q.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				write(t, q, 1, 0)
			}()
			<-started
			l.begin()
			write(t, q, 2, 0)
			l.end()
			close(release)
			<-done
			s := requireConserved(t, q, l.recorder)
			require.Zero(t, s.Rounds, "the runner kept the token")
			require.Equal(t, uint64(2), s.Sent)
		})
	}
}

func TestCloseDuringRound(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			l := newRoundLink()
			q := newOurs(t, name, l, nil)
			l.begin()
			for i := range 3 {
				write(t, q, 1, uint32(i))
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				q.Close()
			}()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close waits for a receive round, which is nobody sending")
			}
			l.end() // after Close: nothing to do, nothing to break
			s := q.QdiscStats()
			require.Equal(t, uint64(3), s.Dropped.Closed, "Close releases what the round queued")
			require.Zero(t, l.received())
			require.Equal(t, s.Enqueued, s.Sent+s.Dropped.Total())
		})
	}
}

// TestRoundsUnderStress runs receive rounds, each writing a few packets of
// its own flows, against 64 senders: every packet is accounted for and
// every flow stays in order.
func TestRoundsUnderStress(t *testing.T) {
	perFlow := 200
	if raceEnabled {
		perFlow = 40
	}
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			l := newRoundLink()
			q := newOurs(t, name, l, nil)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var rounds atomic.Uint64
			roundAccepted := map[uint32]int{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				seq := uint32(0)
				for !stop.Load() {
					l.begin()
					for f := range uint32(3) {
						pkt := flowPacket(1000+f, seq)
						if q.WritePacket(pkt) == nil {
							roundAccepted[1000+f]++
						}
						pkt.DecRef()
					}
					l.end()
					seq++
					rounds.Add(1)
				}
			}()
			accepted := stress(t, q, 64, 2, perFlow)
			stop.Store(true)
			wg.Wait()
			for f, n := range roundAccepted {
				accepted[f] += n
			}
			s := requireConserved(t, q, l.recorder)
			// As in TestStressEveryStrategy: llist accepts before its leader
			// finds the queue full, then drops (counted).
			if name != LList {
				require.Zero(t, s.Dropped.Total(), fmt.Sprintf("%+v", s.Dropped))
			}
			requireDelivered(t, s, l.recorder, accepted)
			require.Positive(t, rounds.Load())
			q.Close()
		})
	}
}

// roundCostly is the costed link of BenchmarkWritePacket, delivering in
// rounds (RoundNotifier) when rounds is set.
type roundCostly struct {
	costly
	begin, end func()
}

func (l *roundCostly) NotifyRounds(begin, end func()) { l.begin, l.end = begin, end }

// plain hides roundCostly's NotifyRounds: the same link, without rounds.
type plain struct{ l *roundCostly }

func (p plain) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	return p.l.WritePackets(pkts)
}

// BenchmarkRound writes perRound packets per receive round, as a round's
// delivery does (echo replies, forwarded packets), through rootlock to a
// link costing 2us per call and 100ns per packet, with the round hooks
// (one flush per round) and without (one write per packet).
func BenchmarkRound(b *testing.B) {
	for _, perRound := range []int{1, 8, 64} {
		for _, rounds := range []bool{false, true} {
			b.Run(fmt.Sprintf("per_round=%d/rounds=%v", perRound, rounds), func(b *testing.B) {
				l := &roundCostly{costly: costly{call: 2 * time.Microsecond, packet: 100 * time.Nanosecond}}
				var lower stack.LinkWriter = plain{l}
				if rounds {
					lower = l
				}
				qd, err := New(RootLock, lower, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer qd.Close()
				pkt := newPacket()
				defer pkt.DecRef()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i += perRound {
					if l.begin != nil {
						l.begin()
					}
					for range perRound {
						if err := qd.WritePacket(pkt); err != nil {
							b.Fatal(err)
						}
					}
					if l.end != nil {
						l.end()
					}
				}
				b.StopTimer()
				s := qd.(Reporter).QdiscStats()
				b.ReportMetric(float64(s.Sent)/float64(max(s.Batches, 1)), "pkts/batch")
			})
		}
	}
}
