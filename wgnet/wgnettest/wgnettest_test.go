package wgnettest_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgnettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var addrA, addrB = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")

func newTUN(t *testing.T, a netip.Addr) (tun.Device, *wgnet.Net) {
	d, n, err := wgnet.CreateNetTUN([]netip.Addr{a}, nil, 1420)
	require.NoError(t, err)
	return d, n
}

// TestPairCarries: a UDP datagram crosses the tunnel Pair builds, and
// closing the devices stops every goroutine (TestMain).
func TestPairCarries(t *testing.T) {
	ta, na := newTUN(t, addrA)
	tb, nb := newTUN(t, addrB)
	da, db, err := wgnettest.Pair(ta, tb, addrA, addrB, nil)
	require.NoError(t, err)
	defer da.Close()
	defer db.Close()
	srv, err := nb.ListenUDPAddrPort(netip.AddrPortFrom(addrB, 5000))
	require.NoError(t, err)
	defer srv.Close()
	cli, err := na.DialUDPAddrPort(netip.AddrPort{}, netip.AddrPortFrom(addrB, 5000))
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.Write([]byte("through"))
	require.NoError(t, err)
	// A guard against a hang, not a timing: the handshake takes
	// milliseconds.
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(30*time.Second)))
	buf := make([]byte, 16)
	n, _, err := srv.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "through", string(buf[:n]))
}

// TestPairClosesOnError: Pair owns the TUNs it is given, so it closes
// them when it fails.
func TestPairClosesOnError(t *testing.T) {
	ta, _ := newTUN(t, addrA)
	tb, _ := newTUN(t, addrB)
	_, _, err := wgnettest.Pair(ta, tb, addrA, netip.Addr{}, nil)
	require.ErrorContains(t, err, "valid")
	for _, d := range []tun.Device{ta, tb} {
		_, open := <-d.Events()
		require.True(t, open, "EventUp is still queued")
		_, open = <-d.Events()
		require.False(t, open, "the TUN is closed")
	}
}
