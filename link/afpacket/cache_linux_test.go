//go:build linux

package afpacket

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// udpFrame is a received frame: a virtio-net header, Ethernet, IPv4, UDP
// from port sport with payload.
func udpFrame(sport uint16, payload []byte) []byte {
	return withVnet(vnet.Header{}, frame(header.IPv4ProtocolNumber, ip4(header.UDPProtocolNumber, sport, 2, payload, "full")))
}

// parkRound is the receive goroutine's round when it finds the socket
// empty: the landing batch goes back to the cache, parked.
func parkRound(q *queue) {
	q.gate.Owner.Lock()
	q.parkLanding()
	q.gate.Owner.Unlock()
}

// TestRXSteadyStateAllocs: a receive round allocates nothing in the
// endpoint once warm, with the cache and without (gVisor's packet and
// view come from its pools).
func TestRXSteadyStateAllocs(t *testing.T) {
	testenv.SkipUnderRace(t, "the race detector makes gVisor's sync.Pools drop items at random")
	for _, noCache := range []bool{false, true} {
		e, far := testEndpoint(t, &Options{NoCache: noCache}, 0)
		c := &linktest.Counter{}
		e.AttachAndStart(c, func() {}) // rounds are driven by hand
		q := e.queues[0]
		f := udpFrame(1, make([]byte, 100))
		const batch = 8
		var want uint64
		round := func() {
			for range batch {
				if _, err := unix.Write(far[0], f); err != nil {
					t.Fatal(err)
				}
			}
			want += batch
			for c.Count() < want {
				q.busyPoll()
			}
			parkRound(q) // as the receive goroutine does before it parks
		}
		round()
		allocs := testing.AllocsPerRun(200, round)
		require.Zero(t, allocs, "allocations per round of %d frames (NoCache %v)", batch, noCache)
	}
}

// TestRXLandingBatchNotReusedWhileReferenced: packets delivered from a
// round keep their bytes while the stack holds them, however many later
// rounds land in the same landing batch (each packet is copied out of it
// before delivery, so the batch can be the cache's again at once).
func TestRXLandingBatchNotReusedWhileReferenced(t *testing.T) {
	e, far := testEndpoint(t, nil, 0)
	h := &linktest.Sink{Hold: true}
	e.AttachAndStart(h, func() {})
	q := e.queues[0]
	payload := func(i int) []byte {
		p := make([]byte, 64)
		for j := range p {
			p[j] = byte(i)
		}
		return p
	}
	const rounds, per = 5, 4
	for r := range rounds {
		for i := range per {
			_, err := unix.Write(far[0], udpFrame(uint16(r*per+i), payload(r*per+i)))
			require.NoError(t, err)
		}
		for h.Len() < (r+1)*per {
			q.busyPoll()
		}
		parkRound(q)
	}
	defer h.Release()
	held := h.Held()
	require.Len(t, held, rounds*per)
	for i, pkt := range held {
		b := pkt.Data().AsRange().ToSlice()
		require.Equal(t, payload(i), b[header.IPv4MinimumSize+header.UDPMinimumSize:], "packet %d intact", i)
	}
	s := e.CacheStats()
	require.Positive(t, s.Hits, "the landing batch came back from the cache")
}

// TestRXIdleLandingBatchReleased: a queue that has parked for DefaultIdleAfter
// holds no landing batch; the next round gets a fresh one.
func TestRXIdleLandingBatchReleased(t *testing.T) {
	e, far := testEndpoint(t, nil, 0)
	c := &linktest.Counter{}
	e.AttachAndStart(c, func() {})
	q := e.queues[0]
	_, err := unix.Write(far[0], udpFrame(1, []byte("x")))
	require.NoError(t, err)
	for c.Count() < 1 {
		q.busyPoll()
	}
	parkRound(q)
	s := e.CacheStats()
	require.EqualValues(t, 1, s.Held)
	require.Positive(t, s.HeldBytes)
	require.Eventually(t, func() bool { return e.CacheStats().Held == 0 }, time.Minute, 10*time.Millisecond,
		"the idle landing batch is released")
	require.EqualValues(t, 1, e.CacheStats().Released)
	_, err = unix.Write(far[0], udpFrame(2, []byte("y")))
	require.NoError(t, err)
	for c.Count() < 2 {
		q.busyPoll()
	}
	parkRound(q)
	require.EqualValues(t, 2, e.CacheStats().Misses, "a fresh landing batch after the release")
}

// TestTXCacheConcurrentWriters: writers that find the owner's scratch
// taken use the pool instead; every packet goes out and the cache keeps
// at most the owner's one.
func TestTXCacheConcurrentWriters(t *testing.T) {
	e, far := testEndpoint(t, nil, 1<<20)
	pkt := txPacket(e, ip4(header.UDPProtocolNumber, 1, 2, nil, "full"), header.IPv4ProtocolNumber)
	defer pkt.DecRef()
	const writers, each = 8, 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, rxBufSize)
		for got := 0; got < writers*each; {
			pfd := []unix.PollFd{{Fd: int32(far[0]), Events: unix.POLLIN}}
			unix.Poll(pfd, 1000)
			if _, err := unix.Read(far[0], b); err == nil {
				got++
			}
		}
	}()
	errs := make(chan error, writers)
	for range writers {
		go func() {
			l := list(pkt)
			for range each {
				for {
					n, err := e.WritePackets(l)
					if n == 1 {
						break
					}
					if _, full := err.(*tcpip.ErrNoBufferSpace); !full {
						errs <- fmt.Errorf("write: %s", err)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	<-done
	s := e.txCache.Stats()
	require.LessOrEqual(t, s.Held, int64(1))
	require.Positive(t, s.Hits)
}
