//go:build linux

package integration

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// TestServeBusyPoll serves over AF_PACKET and TUN with busy-polling
// readers: UDP round trips from the kernel and an HTTP download come back
// intact, and the readers drove the device queues themselves.
func TestServeBusyPoll(t *testing.T) {
	for _, kind := range []string{"veth", "tun"} {
		for _, mode := range []string{"spin:200", "adaptive"} {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				m, err := poll.Parse(mode)
				require.NoError(t, err)
				n := newSrvNet(t, kind, sched.None, link.Impairments{}, &stack.Options{BusyPoll: m})
				var pc net.Conn
				require.NoError(t, n.k.Do(func() (err error) {
					pc, err = net.Dial("udp", netip.AddrPortFrom(srvUstack4.Addr(), 7).String())
					return err
				}))
				defer pc.Close()
				buf := make([]byte, 1500)
				for i := range 500 {
					msg := []byte{byte(i), byte(i >> 8), 'b', 'p'}
					require.NoError(t, pc.SetDeadline(time.Now().Add(10*time.Second)))
					_, err := pc.Write(msg)
					require.NoError(t, err)
					k, err := pc.Read(buf)
					require.NoError(t, err, "round trip %d", i)
					require.Equal(t, msg, buf[:k])
				}
				n.fetch(t, srvUstack4.Addr(), sized(16<<20))
				st := n.host.Stack().Stats()
				t.Logf("busy poll: %+v", st.BusyPoll)
				require.Equal(t, mode, st.BusyPoll.Mode)
				require.Positive(t, st.BusyPoll.Waits, "the services' readers busy polled")
				// A reader may be inside a wait when the snapshot is taken
				// (the HTTP server's, waiting for the next request): it ends
				// as a hit or a park within its budget.
				require.Eventually(t, func() bool {
					b := n.host.Stack().Stats().BusyPoll
					return b.Waits == b.Hits+b.Parks
				}, 10*time.Second, time.Millisecond, "every busy-poll wait ends as a hit or a park: %+v", n.host.Stack().Stats().BusyPoll)
				if mode == "spin:200" {
					require.Positive(t, st.NICs[0].Link.RXBusyPolled, "readers ran receive rounds on the device")
					require.Positive(t, st.BusyPoll.Hits)
				}
			})
		}
	}
}
