//go:build linux

package tun

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/vnet"
)

// countingSink is a dispatcher that only counts, allocating nothing.
type countingSink struct{ n atomic.Uint64 }

func (c *countingSink) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	c.n.Add(1)
}
func (*countingSink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// holdingSink keeps a reference to every packet, as a socket queue does
// until the application reads.
type holdingSink struct{ pkts []*stack.PacketBuffer }

func (h *holdingSink) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	h.pkts = append(h.pkts, pkt.IncRef())
}
func (*holdingSink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// parkQueue is what the receive goroutine does when it finds the queue
// empty: its landing buffers go back to the cache, parked.
func parkQueue(q *queue) {
	q.gate.Owner.Lock()
	q.parkLanding()
	q.gate.Owner.Unlock()
}

// TestTunRXSteadyStateAllocs: a receive round allocates nothing in the
// endpoint once warm, with the cache and without.
func TestTunRXSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes gVisor's sync.Pools drop items at random")
	}
	for _, noCache := range []bool{false, true} {
		o := DefaultOptions()
		o.NoCache = noCache
		e, peers := pairEndpoint(t, 1, fullOffloads, &o)
		c := &countingSink{}
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
			for c.n.Load() < want {
				q.busyPoll()
			}
			parkQueue(q)
		}
		round()
		require.Zero(t, testing.AllocsPerRun(200, round), "allocations per round of %d packets (NoCache %v)", batch, noCache)
	}
}

// TestTunUSOBufferNotReusedWhileReferenced: datagrams split out of UDP
// super-packets keep their bytes while the stack holds them, though every
// split reuses the same cached buffer.
func TestTunUSOBufferNotReusedWhileReferenced(t *testing.T) {
	e, peers := pairEndpoint(t, 1, fullOffloads, nil)
	h := &holdingSink{}
	e.AttachAndStart(h, func() {})
	q := e.queues[0]
	const supers = 4
	for i := range supers {
		super, vh := udpSuper(false, bytes.Repeat([]byte{byte(i + 1)}, 2500))
		_, err := unix.Write(peers[0], frame(vh, super))
		require.NoError(t, err)
		for len(h.pkts) < (i+1)*3 {
			q.busyPoll()
		}
		parkQueue(q)
	}
	defer func() {
		for _, p := range h.pkts {
			p.DecRef()
		}
	}()
	require.Len(t, h.pkts, supers*3)
	for i, pkt := range h.pkts {
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
	c := &countingSink{}
	e.AttachAndStart(c, func() {})
	q := e.queues[0]
	f := frame(vnet.Header{Flags: vnet.FlagDataValid}, tcp4Packet([]byte("x"), 1))
	_, err := unix.Write(peers[0], f)
	require.NoError(t, err)
	for c.n.Load() < 1 {
		q.busyPoll()
	}
	parkQueue(q)
	require.EqualValues(t, 1, e.CacheStats().Held)
	require.Eventually(t, func() bool { return e.CacheStats().Held == 0 }, time.Minute, 10*time.Millisecond,
		"the idle buffer is released")
	require.EqualValues(t, 1, e.CacheStats().Released)
	_, err = unix.Write(peers[0], f)
	require.NoError(t, err)
	for c.n.Load() < 2 {
		q.busyPoll()
	}
	parkQueue(q)
	require.EqualValues(t, 2, e.CacheStats().Misses, "a fresh buffer after the release")
}
