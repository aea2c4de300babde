package forward

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/testenv"
)

// TestPingDgramControl opens the ping relay's ICMP datagram sockets (what
// it uses without CAP_NET_RAW) in a network namespace whose
// net.ipv4.ping_group_range admits every group: each goes through the
// dialer's Control before it is bound, and is bound to the address given.
func TestPingDgramControl(t *testing.T) {
	ns, err := netns.New("pingdgram")
	if netns.NoPrivilege(err) {
		testenv.Skip(t, "needs root to make a network namespace whose ping_group_range admits this process: %v", err)
	}
	require.NoError(t, err)
	defer ns.Close()
	require.NoError(t, ns.Sysctl("ipv4/ping_group_range", "0 2147483647"))
	var log socketLog
	for _, tc := range []struct {
		network string
		laddr   netip.Addr
	}{
		{"ip4:icmp", netip.MustParseAddr("127.0.0.1")},
		{"ip6:ipv6-icmp", netip.IPv6Loopback()},
	} {
		var local netip.Addr
		require.NoError(t, ns.Do(func() error {
			pc, err := listenPingDgram(log.control, tc.network, tc.laddr)
			if err != nil {
				return err
			}
			defer pc.Close()
			ua, ok := pc.LocalAddr().(*net.UDPAddr)
			if !ok {
				return fmt.Errorf("local address %v (%T), not a *net.UDPAddr", pc.LocalAddr(), pc.LocalAddr())
			}
			local = ua.AddrPort().Addr()
			return nil
		}), tc.network)
		require.True(t, log.has(tc.network, tc.laddr.String()), "%s: %s", tc.network, &log)
		require.Equal(t, tc.laddr, local.Unmap(), "bound to the address given")
	}
}
