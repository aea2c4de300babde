//go:build linux

package tun

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link/linktest"
)

// TestTunRXRingDeviceMTURaised runs the receive ring against a real TUN
// device, whose read returns a packet's whole length even when its buffer
// was shorter: after the device's MTU is raised behind the endpoint's
// back, the first larger packet is lost and counted, and the slots grow at
// once to hold the next ones whole.
func TestTunRXRingDeviceMTURaised(t *testing.T) {
	ns := testNS(t, "tunoff-rxring")
	// No IPv6 on the device: its router and listener solicitations would
	// arrive among the test's packets.
	require.NoError(t, ns.Sysctl("ipv6/conf/default/disable_ipv6", "1"))
	const name = "tunring0"
	var e *Endpoint
	require.NoError(t, ns.Do(func() (err error) {
		e, err = Open(name, &Options{NoOffload: true, NoGRO: true, MTU: MinMTU, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.77.1/24")}})
		return err
	}))
	defer e.Close()
	q := e.queues[0]
	requireRing(t, q.rxRing != nil)
	s := linktest.NewSink()
	e.AttachAndStart(s, func() {}) // rounds are driven by hand
	fd := uintptr(queueFD(q))
	slot := q.rxSlot
	require.NoError(t, ns.SetMTU(name, 3000))
	// send has the kernel send UDP datagrams of these payload sizes to
	// ustack's side of the device.
	send := func(sizes ...int) {
		t.Helper()
		require.NoError(t, ns.Do(func() error {
			c, err := net.Dial("udp4", "198.18.77.2:9")
			if err != nil {
				return err
			}
			defer c.Close()
			for _, n := range sizes {
				if _, err := c.Write(make([]byte, n)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	const big = 2500
	bigIP := header.IPv4MinimumSize + header.UDPMinimumSize + big
	// A read(2), a trip of two, and a trip of four whose first read finds
	// the large datagram.
	send(100, 100, 100, big)
	n, again, err := q.roundLocked(fd)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, again)
	require.Equal(t, uint64(1), e.LinkStats().RXErrors, "the cut packet counted")
	// A TUN read says how large the packet was: the slots hold it, and
	// at least twice what they held.
	require.GreaterOrEqual(t, q.rxSlot, rxSlotFor(bigIP))
	require.GreaterOrEqual(t, q.rxSlot, 2*slot)

	send(big, big)
	q.beginRound()
	n, again, err, ok := q.readRing(fd, q.landing(), 3)
	q.endRound()
	require.True(t, ok)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.False(t, again)
	got := s.Wait(t, 5)
	for i, p := range got {
		want := header.IPv4MinimumSize + header.UDPMinimumSize + 100
		if i >= 3 {
			want = bigIP
		}
		require.Len(t, p.Data, want, "packet %d", i)
	}
	require.Equal(t, uint64(1), e.LinkStats().RXErrors)
}
