package sched

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/linktest"
)

// ours lists the strategies over the shared core.
var ours = []string{RootLock, BusyLock, EnqLock, LList}

// flowPacket builds a packet carrying its flow and sequence number.
func flowPacket(flow, seq uint32) *stack.PacketBuffer {
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], flow)
	binary.BigEndian.PutUint32(data[4:], seq)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(data)})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

func flowOf(pkt *stack.PacketBuffer) (uint32, uint32) {
	b := pkt.ToBuffer()
	defer b.Release()
	data := b.Flatten()
	return binary.BigEndian.Uint32(data[0:]), binary.BigEndian.Uint32(data[4:])
}

// recorder is the link under test: a linktest.Writer, which refuses what
// Take says, sleeps Delay and checks that writes never overlap, with a
// check of what a discipline promises on top: per-flow order, and that
// every packet arrives once (flows).
type recorder struct {
	*linktest.Writer
	flows *flowLog
}

// flowLog is what the recorder saw of each flow.
type flowLog struct {
	mu   sync.Mutex
	last map[uint32]uint32
	got  map[uint32]int
}

// check is the Writer's Check: it reports a packet out of its flow's order.
func (f *flowLog) check(p *stack.PacketBuffer) string {
	flow, seq := flowOf(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	last, seen := f.last[flow]
	f.last[flow] = seq
	f.got[flow]++
	if seen && seq <= last {
		return fmt.Sprintf("flow %d: seq %d after %d", flow, seq, last)
	}
	return ""
}

func newRecorder() *recorder {
	f := &flowLog{last: map[uint32]uint32{}, got: map[uint32]int{}}
	return &recorder{Writer: &linktest.Writer{Check: f.check}, flows: f}
}

func (r *recorder) received() int { return r.Taken() }

func newOurs(t testing.TB, name string, lower stack.LinkWriter, o *Options) *Qdisc {
	qd, err := New(name, lower, o)
	require.NoError(t, err)
	return qd.(*Qdisc)
}

// requireConserved checks the accounting identities once quiet.
func requireConserved(t *testing.T, q *Qdisc, r *recorder) Stats {
	t.Helper()
	var s Stats
	require.Eventually(t, func() bool {
		s = q.QdiscStats()
		return s.Backlog == 0 && s.Enqueued == s.Sent+s.Dropped.Total() && int(s.Sent) == r.received()
	}, 20*time.Second, time.Millisecond, "queue drains and every accepted packet is sent or dropped")
	require.Equal(t, s.Offered, s.Enqueued+s.Refused.Total(), "offered = accepted + refused")
	require.Equal(t, s.Enqueued, s.Sent+s.Dropped.Total()+uint64(s.Backlog), "enqueued = sent + dropped + backlog")
	require.Empty(t, r.Problems())
	return s
}

// requireDelivered checks that every packet a flow had accepted arrived,
// or was dropped after acceptance and counted.
func requireDelivered(t *testing.T, s Stats, r *recorder, accepted map[uint32]int) {
	t.Helper()
	var lost uint64
	r.flows.mu.Lock()
	defer r.flows.mu.Unlock()
	for f, n := range accepted {
		require.LessOrEqual(t, r.flows.got[f], n, "flow %d", f)
		lost += uint64(n - r.flows.got[f])
	}
	require.Equal(t, s.Dropped.Total(), lost, "every accepted packet arrived or was counted as dropped")
}

// stress runs senders goroutines, each writing its own flows, and returns
// how many packets each flow had accepted.
func stress(t *testing.T, q *Qdisc, senders, flowsEach, perFlow int) map[uint32]int {
	var mu sync.Mutex
	accepted := map[uint32]int{}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := map[uint32]int{}
			for i := range perFlow * flowsEach {
				flow := uint32(s*flowsEach + i%flowsEach)
				pkt := flowPacket(flow, uint32(i/flowsEach))
				if q.WritePacket(pkt) == nil {
					mine[flow]++
				}
				pkt.DecRef()
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
			mu.Lock()
			for f, n := range mine {
				accepted[f] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return accepted
}

func TestStressEveryStrategy(t *testing.T) {
	perFlow := 300
	if raceEnabled {
		perFlow = 60
	}
	for _, name := range ours {
		// With HandOff, writers that find the queue idle queue for the
		// background goroutine instead of bypassing it.
		for _, c := range []struct {
			senders int
			handOff bool
		}{{64, false}, {128, false}, {64, true}} {
			t.Run(fmt.Sprintf("%s/senders=%d/handoff=%v", name, c.senders, c.handOff), func(t *testing.T) {
				r := newRecorder()
				q := newOurs(t, name, r, &Options{HandOff: c.handOff})
				accepted := stress(t, q, c.senders, 3, perFlow)
				s := requireConserved(t, q, r)
				// The lock-based strategies refuse at the limit, telling the
				// caller; llist's deferred packets are accepted before the
				// leader finds the queue full, and then dropped (counted).
				if name != LList {
					require.Zero(t, s.Dropped.Total(), "refused, never dropped after acceptance")
				}
				requireDelivered(t, s, r, accepted)
				require.Positive(t, s.Sent)
				if c.handOff {
					require.Positive(t, s.HandedOff)
					require.Zero(t, s.Bypassed, "no packet bypasses the queue")
				}
				q.Close()
			})
		}
	}
}

// TestLinkRefusesHalf runs senders against a link that refuses half of
// every other batch (rounded up, so a lone packet is refused whole) and
// takes all of the rest: every run sees refusals, and every run makes
// progress.
func TestLinkRefusesHalf(t *testing.T) {
	for _, name := range ours {
		for _, signals := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/signals=%v", name, signals), func(t *testing.T) {
				var writes atomic.Int64
				r := newRecorder()
				r.Take = func(n int) int {
					if writes.Add(1)%2 == 1 {
						return n / 2
					}
					return n
				}
				r.Delay = 10 * time.Microsecond // let queues, and so batches, build
				var lower stack.LinkWriter = r
				if signals {
					lower = linktest.NotifyingWriter{Writer: r.Writer}
				}
				q := newOurs(t, name, lower, nil)
				accepted := stress(t, q, 16, 2, 100)
				s := requireConserved(t, q, r)
				if name != LList {
					require.Zero(t, s.Dropped.Total(), "refused, never dropped after acceptance")
				}
				requireDelivered(t, s, r, accepted)
				require.Positive(t, s.Requeued, "refused packets went back to the queue")
				if signals {
					// Every refusal is signalled (whether the signal comes
					// before the runner checks is up to the scheduler).
					require.Positive(t, s.WritableWakeups)
					require.Zero(t, s.TimerRetries)
				} else {
					// No signal can come, so every refusal parks the runner.
					require.Positive(t, s.LinkFull, "the first write was refused in part")
					require.Positive(t, s.TimerRetries, "a link that cannot signal is retried on a timer")
				}
				q.Close()
			})
		}
	}
}

// TestNoLostWakeup makes a packet arrive exactly while the runner is
// between its last transmit and its check for more work. The runner must
// take it: if it decided to stop before re-checking under the lock, the
// packet would sit in the queue with nobody running.
func TestNoLostWakeup(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			q := newOurs(t, name, r, nil)
			var once sync.Once
			q.hookBeforeRecheck = func() {
				once.Do(func() {
					done := make(chan tcpip.Error)
					go func() {
						pkt := flowPacket(1, 2)
						done <- q.WritePacket(pkt)
						pkt.DecRef()
					}()
					// The second writer finds a runner and must return
					// without sending: the runner owes it a transmit.
					require.Nil(t, <-done)
				})
			}
			pkt := flowPacket(1, 1)
			require.Nil(t, q.WritePacket(pkt))
			pkt.DecRef()
			// The first WritePacket was the runner: by the time it returns,
			// it has sent both packets, with no help from the background.
			require.Equal(t, 2, r.received(), "the runner re-checked and sent the late packet")
			s := q.QdiscStats()
			require.Equal(t, uint64(1), s.Bypassed)
			require.Zero(t, s.QuotaHandoffs)
			q.hookBeforeRecheck = nil
			q.Close()
		})
	}
}

func TestCloseWhileSending(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			r.Delay = 20 * time.Microsecond
			q := newOurs(t, name, r, nil)
			var wg sync.WaitGroup
			var accepted, closedErrs atomic.Uint64
			for s := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						pkt := flowPacket(uint32(s), uint32(i))
						err := q.WritePacket(pkt)
						pkt.DecRef()
						switch err.(type) {
						case nil:
							accepted.Add(1)
						case *tcpip.ErrClosedForSend:
							closedErrs.Add(1)
							return
						}
					}
				}()
			}
			time.Sleep(20 * time.Millisecond)
			q.Close()
			wg.Wait()
			q.Close() // idempotent
			s := q.QdiscStats()
			require.Equal(t, 32, int(closedErrs.Load()))
			require.Zero(t, s.Backlog)
			require.Equal(t, s.Enqueued, s.Sent+s.Dropped.Total(), "everything accepted was sent or released by Close")
			require.Equal(t, s.Offered, s.Enqueued+s.Refused.Total())
			require.Equal(t, int(s.Sent), r.received())
			require.Empty(t, r.Problems())
		})
	}
}

func TestQuotaHandsOff(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			r.Delay = 50 * time.Microsecond
			q := newOurs(t, name, r, &Options{Quota: 8, Batch: 4})
			stress(t, q, 8, 1, 200)
			s := requireConserved(t, q, r)
			require.Positive(t, s.QuotaHandoffs, "a run stops at its quota")
			require.LessOrEqual(t, s.Sent, s.Batches*4, "batches never exceed Batch")
			q.Close()
		})
	}
}

func TestBypassWhenIdle(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			q := newOurs(t, name, r, nil)
			for i := range 100 {
				pkt := flowPacket(1, uint32(i))
				require.Nil(t, q.WritePacket(pkt))
				pkt.DecRef()
			}
			s := q.QdiscStats()
			require.Equal(t, uint64(100), s.Bypassed, "one sender at a time always finds the queue empty")
			require.Equal(t, uint64(100), s.Sent)
			require.LessOrEqual(t, s.Latency.Count(), uint64(100), "latency is sampled")
			q.Close()
		})
	}
}

// TestHandOffWhenIdle: with Options.HandOff a writer that finds the queue
// idle returns before its packet is written (the link here holds every
// write until released), and the background goroutine sends it and what
// queued behind it, in order.
func TestHandOffWhenIdle(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			entered, release := make(chan struct{}, 1), make(chan struct{})
			r.Take = func(n int) int {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
				return n
			}
			q := newOurs(t, name, r, &Options{HandOff: true})
			returned := make(chan tcpip.Error)
			go func() {
				pkt := flowPacket(1, 0)
				returned <- q.WritePacket(pkt)
				pkt.DecRef()
			}()
			select {
			case err := <-returned:
				require.Nil(t, err)
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("WritePacket into an idle queue waited for the link: it did not hand the packet off")
			}
			// The background goroutine is (or will be) in the held write:
			// these queue behind it.
			<-entered
			for i := 1; i < 10; i++ {
				pkt := flowPacket(1, uint32(i))
				require.Nil(t, q.WritePacket(pkt))
				pkt.DecRef()
			}
			close(release)
			s := requireConserved(t, q, r)
			require.Equal(t, uint64(10), s.Sent)
			require.Equal(t, uint64(1), s.HandedOff, "only the first packet found the queue idle")
			require.Zero(t, s.Bypassed)
			q.Close()
		})
	}
}

// TestLListCapsBurst holds the root lock so that the leader cannot detach,
// and checks that the deferred list stops at MaxBurst, refusing the excess,
// and that the pushers in the list return at once without error.
func TestLListCapsBurst(t *testing.T) {
	r := newRecorder()
	q := newOurs(t, LList, r, &Options{MaxBurst: 4})
	q.root.mu.Lock()
	leader := make(chan tcpip.Error)
	go func() {
		pkt := flowPacket(0, 0)
		leader <- q.WritePacket(pkt)
		pkt.DecRef()
	}()
	require.Eventually(t, func() bool { return q.deferred.Load() != nil }, 10*time.Second, time.Microsecond)
	var ok, refused int
	for i := 1; i <= 10; i++ {
		pkt := flowPacket(0, uint32(i))
		if q.WritePacket(pkt) == nil {
			ok++
		} else {
			refused++
		}
		pkt.DecRef()
	}
	q.root.mu.Unlock()
	require.Nil(t, <-leader)
	require.Equal(t, 3, ok, "the list holds MaxBurst packets, the leader's among them")
	require.Equal(t, 7, refused)
	s := requireConserved(t, q, r)
	require.Equal(t, uint64(7), s.Refused.Burst)
	require.Equal(t, uint64(4), s.Sent)
	q.Close()
}

func TestOverlimitRefuses(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			r := newRecorder()
			block := make(chan struct{})
			var once sync.Once
			started := make(chan struct{})
			r.Take = func(n int) int {
				once.Do(func() {
					close(started)
					<-block
				})
				return n
			}
			q := newOurs(t, name, r, &Options{Limit: 8, MaxBurst: 4})
			// The first packet becomes the runner and blocks inside the
			// link; everything after it queues behind.
			go func() {
				pkt := flowPacket(0, 0)
				q.WritePacket(pkt)
				pkt.DecRef()
			}()
			<-started
			var refused int
			for i := 1; i <= 20; i++ {
				pkt := flowPacket(0, uint32(i))
				if q.WritePacket(pkt) != nil {
					refused++
				}
				pkt.DecRef()
			}
			close(block)
			s := requireConserved(t, q, r)
			require.Positive(t, refused)
			// One writer at a time: even llist's leader is alone in its
			// batch, so it is told.
			require.Equal(t, uint64(refused), s.Refused.Overlimit)
			require.Equal(t, uint64(refused), s.Refused.Total())
			q.Close()
		})
	}
}

func TestLinkErrorsDrop(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			q := newOurs(t, name, &linktest.Writer{Fail: &tcpip.ErrClosedForSend{}}, nil)
			for i := range 10 {
				pkt := flowPacket(0, uint32(i))
				require.Nil(t, q.WritePacket(pkt), "accepted: the failure is the link's")
				pkt.DecRef()
			}
			s := q.QdiscStats()
			require.Equal(t, uint64(10), s.Dropped.Link)
			require.Zero(t, s.Sent)
			q.Close()
		})
	}
}

func TestStatsOutput(t *testing.T) {
	r := newRecorder()
	q := newOurs(t, BusyLock, r, nil)
	stress(t, q, 8, 1, 50)
	requireConserved(t, q, r)
	s := q.QdiscStats()
	var names []string
	for _, l := range s.Locks {
		names = append(names, l.Name)
	}
	require.Equal(t, []string{"busylock", "root"}, names)
	var sb strings.Builder
	require.NoError(t, s.WriteContention(&sb))
	require.Contains(t, sb.String(), "@writepacket_ns:")
	require.Contains(t, sb.String(), "total wait")
	d := s.Sub(s)
	require.Zero(t, d.Sent)
	require.Zero(t, d.Latency.Count())
	q.Close()

	lq := newOurs(t, LList, newRecorder(), nil)
	require.Equal(t, "defer_list", lq.QdiscStats().Locks[0].Name)
	lq.Close()
}

func TestHistogram(t *testing.T) {
	var l latency
	for _, d := range []time.Duration{0, 1, 2, 3, 1000, 1023, 1024, time.Millisecond} {
		l.record(d)
	}
	h := l.snapshot()
	require.Equal(t, uint64(8), h.Count())
	require.Equal(t, uint64(1), h[0])
	require.Equal(t, uint64(1), h[1])
	require.Equal(t, uint64(2), h[2], "2 and 3")
	require.Equal(t, uint64(2), h[10], "1000 and 1023")
	require.Equal(t, uint64(1), h[11], "1024")
	require.Equal(t, uint64(1023), h.Quantile(0.75))
	require.Contains(t, h.String(), "[512, 1K)")
	require.Contains(t, h.String(), "[1K, 2K)")
}
