//go:build linux

package tun

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// parkQueue is what the receive goroutine does when it finds the queue
// empty: its landing buffers go back to the cache, parked.
func parkQueue(q *queue) {
	q.gate.Owner.Lock()
	q.parkLanding()
	q.gate.Owner.Unlock()
}

// TestTunRXSteadyStateAllocs: a receive round allocates nothing in the
// endpoint once warm, with the cache and without. Under the race
// detector, which makes gVisor's sync.Pools drop items at random, the
// rounds run but their allocations are not counted.
func TestTunRXSteadyStateAllocs(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		o := DefaultOptions()
		o.NoCache = noCache
		e, peers := pairEndpoint(t, 1, fullOffloads, &o)
		c := &linktest.Counter{}
		e.AttachAndStart(c, func() {}) // rounds are driven by hand
		q := e.queues[0]
		f := frame(vnet.Header{Flags: vnet.FlagDataValid}, tcp4Packet(make([]byte, 100), 1))
		const batch = 8
		var want uint64
		round := func() {
			for range batch {
				if _, err := unix.Write(peers[0], f); err != nil {
					t.Fatal(err)
				}
			}
			want += batch
			for c.Count() < want {
				q.busyPoll()
			}
			parkQueue(q)
		}
		round()
		allocs := testing.AllocsPerRun(200, round)
		if !testenv.RaceEnabled {
			require.Zero(t, allocs, "allocations per round of %d packets (NoCache %v)", batch, noCache)
		}
	}
}

// TestTunUSOBufferNotReusedWhileReferenced: datagrams split out of UDP
// super-packets keep their bytes while the stack holds them, though every
// split reuses the same cached buffer.
func TestTunUSOBufferNotReusedWhileReferenced(t *testing.T) {
	e, peers := pairEndpoint(t, 1, fullOffloads, nil)
	h := &linktest.Sink{Hold: true}
	e.AttachAndStart(h, func() {})
	q := e.queues[0]
	const supers = 4
	for i := range supers {
		super, vh := udpSuper(false, bytes.Repeat([]byte{byte(i + 1)}, 2500))
		_, err := unix.Write(peers[0], frame(vh, super))
		require.NoError(t, err)
		for h.Len() < (i+1)*3 {
			q.busyPoll()
		}
		parkQueue(q)
	}
	defer h.Release()
	held := h.Held()
	require.Len(t, held, supers*3)
	for i, pkt := range held {
		b := pkt.Data().AsRange().ToSlice()
		payload := b[header.IPv4MinimumSize+header.UDPMinimumSize:]
		require.Equal(t, bytes.Repeat([]byte{byte(i/3 + 1)}, len(payload)), payload, "datagram %d intact", i)
	}
	require.Positive(t, e.CacheStats().Hits)
}

// TestTunIdleBuffersReleased: a queue that has parked for
// DefaultIdleAfter holds no landing buffer; the next round gets a fresh one.
func TestTunIdleBuffersReleased(t *testing.T) {
	e, peers := pairEndpoint(t, 1, fullOffloads, nil)
	c := &linktest.Counter{}
	e.AttachAndStart(c, func() {})
	q := e.queues[0]
	f := frame(vnet.Header{Flags: vnet.FlagDataValid}, tcp4Packet([]byte("x"), 1))
	_, err := unix.Write(peers[0], f)
	require.NoError(t, err)
	for c.Count() < 1 {
		q.busyPoll()
	}
	parkQueue(q)
	require.EqualValues(t, 1, e.CacheStats().Held)
	require.Eventually(t, func() bool { return e.CacheStats().Held == 0 }, time.Minute, 10*time.Millisecond,
		"the idle buffer is released")
	require.EqualValues(t, 1, e.CacheStats().Released)
	_, err = unix.Write(peers[0], f)
	require.NoError(t, err)
	for c.Count() < 2 {
		q.busyPoll()
	}
	parkQueue(q)
	require.EqualValues(t, 2, e.CacheStats().Misses, "a fresh buffer after the release")
}
