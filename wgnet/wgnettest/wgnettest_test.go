package wgnettest_test

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgnettest"
)

// TestMain runs gVisor's reference leak check: both ends of every tunnel
// here are ustack (wgnet), so any packet buffer left referenced once the
// devices are closed is a leak in wgnet's stack or endpoint.
func TestMain(m *testing.M) { leakcheck.Main(m) }

var addrA, addrB = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")

// The IPv6 tunnel's inner addresses (unique local, never routed).
var addrA6, addrB6 = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")

func newTUN(t *testing.T, a netip.Addr) (tun.Device, *wgnet.Net) {
	return newTUNWith(t, a, nil)
}

func newTUNWith(t *testing.T, a netip.Addr, opts *wgnet.Options) (tun.Device, *wgnet.Net) {
	d, n, err := wgnet.CreateNetTUNWithOptions([]netip.Addr{a}, nil, 1420, opts)
	require.NoError(t, err)
	return d, n
}

// TestPairCarries: a UDP datagram and a TCP stream cross the tunnel Pair
// builds, over IPv4 and IPv6, with wgnet's default qdisc and with none
// (gVisor's delegating qdisc writing straight to the endpoint); closing
// the devices stops every goroutine and releases every packet buffer
// (TestMain). The stream is long enough for the endpoint's TSO cutting
// and GRO to run. (The endpoint's queue towards the device filling up
// under qdisc none is bench's udp_stream/wg/none, leak-checked there.)
func TestPairCarries(t *testing.T) {
	for _, ips := range []struct {
		name string
		a, b netip.Addr
	}{{"ipv4", addrA, addrB}, {"ipv6", addrA6, addrB6}} {
		for _, q := range []string{wgnet.DefaultQdisc, sched.None} {
			t.Run(ips.name+"/"+q, func(t *testing.T) {
				opts := &wgnet.Options{Qdisc: q}
				ta, na := newTUNWith(t, ips.a, opts)
				tb, nb := newTUNWith(t, ips.b, opts)
				da, db, err := wgnettest.Pair(ta, tb, ips.a, ips.b, nil)
				require.NoError(t, err)
				defer da.Close()
				defer db.Close()
				carryDatagram(t, na, nb, ips.b)
				carryStream(t, na, nb, ips.b)
			})
		}
	}
}

// carryDatagram sends one UDP datagram from na to nb at addr.
func carryDatagram(t *testing.T, na, nb *wgnet.Net, addr netip.Addr) {
	srv, err := nb.ListenUDPAddrPort(netip.AddrPortFrom(addr, 5000))
	require.NoError(t, err)
	defer srv.Close()
	cli, err := na.DialUDPAddrPort(netip.AddrPort{}, netip.AddrPortFrom(addr, 5000))
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

// streamSize is what carryStream sends: hundreds of TSO super-segments.
const streamSize = 8 << 20

// carryStream sends streamSize bytes over TCP from na to nb at addr and
// checks that all of them arrive.
func carryStream(t *testing.T, na, nb *wgnet.Net, addr netip.Addr) {
	ln, err := nb.ListenTCPAddrPort(netip.AddrPortFrom(addr, 6000))
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		// A guard against a hang, not a timing.
		if c.SetReadDeadline(time.Now().Add(30*time.Second)) != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := na.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(addr, 6000))
	require.NoError(t, err)
	_, err = io.Copy(c, io.LimitReader(zeros{}, streamSize))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.Equal(t, int64(streamSize), <-got)
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
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
