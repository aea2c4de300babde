//go:build linux

package tun

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestTunTXRing: without the virtio-net header a batch leaves in one
// system call through the ring, every packet whole and in order; with
// NoTXRing, one writev each.
func TestTunTXRing(t *testing.T) {
	for _, noRing := range []bool{false, true} {
		e, peers := pairEndpoint(t, 1, Offloads{}, &Options{NoTXRing: noRing})
		if !noRing && e.queues[0].ring == nil {
			t.Skip("this kernel offers no io_uring")
		}
		const count = txRingEntries + 6 // two trips
		var pkts []*stack.PacketBuffer
		for i := range count {
			payload := make([]byte, 100+i)
			for j := range payload {
				payload[j] = byte(i + j)
			}
			p := outPacket(1000, payload, false)
			defer p.DecRef()
			pkts = append(pkts, p)
		}
		n, err := e.WritePackets(list(pkts...))
		require.Nil(t, err)
		require.Equal(t, count, n)
		for i, p := range pkts {
			require.Equal(t, flat(p), readPeer(t, peers[0]), "packet %d", i)
		}
		s := e.LinkStats()
		require.Equal(t, uint64(count), s.TXPackets)
		want := uint64(count)
		if !noRing {
			want = 2
		}
		require.Equal(t, want, s.TXSyscalls, "NoTXRing %v", noRing)
	}
}
