package wgnet_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgnettest"
)

// The tunnel's inner addresses: test ranges that never leave the
// process (the devices are joined by in-memory binds).
var (
	addrA = netip.MustParseAddr("198.18.0.1")
	addrB = netip.MustParseAddr("198.18.0.2")
)

// testMTU is wireguard-go's default MTU.
const testMTU = 1420

// side is one end of a tunnel: its tun.Device and how to dial, listen
// and resolve through the network behind it, whichever netstack that is.
type side struct {
	tun    tun.Device
	listen func(port int) (net.Listener, error)
	dial   func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
	udp    func(laddr, raddr netip.AddrPort) (net.Conn, error)
	lookup func(ctx context.Context, host string) ([]string, error)
}

func ustackSide(tb testing.TB, addr netip.Addr, opts *wgnet.Options, dns ...netip.Addr) (side, *wgnet.Net) {
	tb.Helper()
	return ustackSideWith(tb, []netip.Addr{addr}, opts, dns...)
}

// ustackSideWith is ustackSide with the Net's every address given.
func ustackSideWith(tb testing.TB, addrs []netip.Addr, opts *wgnet.Options, dns ...netip.Addr) (side, *wgnet.Net) {
	tb.Helper()
	dev, tnet, err := wgnet.CreateNetTUNWithOptions(addrs, dns, testMTU, opts)
	require.NoError(tb, err)
	return side{
		tun: dev,
		listen: func(port int) (net.Listener, error) {
			return tnet.ListenTCP(&net.TCPAddr{Port: port})
		},
		dial: func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
			return tnet.DialContextTCPAddrPort(ctx, ap)
		},
		udp: func(laddr, raddr netip.AddrPort) (net.Conn, error) {
			return tnet.DialUDPAddrPort(laddr, raddr)
		},
		lookup: tnet.LookupContextHost,
	}, tnet
}

func netstackSide(tb testing.TB, addr netip.Addr) side {
	tb.Helper()
	return netstackSideWith(tb, []netip.Addr{addr})
}

// netstackSideWith is netstackSide with the Net's every address given.
func netstackSideWith(tb testing.TB, addrs []netip.Addr, dns ...netip.Addr) side {
	tb.Helper()
	dev, tnet, err := netstack.CreateNetTUN(addrs, dns, testMTU)
	require.NoError(tb, err)
	return side{
		tun: dev,
		listen: func(port int) (net.Listener, error) {
			return tnet.ListenTCP(&net.TCPAddr{Port: port})
		},
		dial: func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
			return tnet.DialContextTCPAddrPort(ctx, ap)
		},
		udp: func(laddr, raddr netip.AddrPort) (net.Conn, error) {
			return tnet.DialUDPAddrPort(laddr, raddr)
		},
		lookup: tnet.LookupContextHost,
	}
}

// join runs a wireguard-go device over each side's TUN, peers of each
// other over in-memory binds (wgnettest.Pair), and closes both when the
// test ends (which closes the TUNs).
func join(tb testing.TB, a, b side) {
	tb.Helper()
	da, db, err := wgnettest.Pair(a.tun, b.tun, addrA, addrB, device.NewLogger(device.LogLevelError, "wg: "))
	require.NoError(tb, err)
	tb.Cleanup(da.Close)
	tb.Cleanup(db.Close)
}

// ustackPair joins wgnet Nets at addrA and addrB with default options,
// A asking the DNS servers dnsA, and returns both; the tunnel closes when
// the test ends.
func ustackPair(tb testing.TB, dnsA ...netip.Addr) (tnetA, tnetB *wgnet.Net) {
	tb.Helper()
	a, tnetA := ustackSide(tb, addrA, nil, dnsA...)
	b, tnetB := ustackSide(tb, addrB, nil)
	join(tb, a, b)
	return tnetA, tnetB
}

// connect listens on b at port, dials it from a, and returns both conns,
// closed when the test ends.
func connect(tb testing.TB, a, b side, port int) (client, server net.Conn) {
	tb.Helper()
	ln, err := b.listen(port)
	require.NoError(tb, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := a.dial(ctx, netip.AddrPortFrom(addrB, uint16(port)))
	if err != nil {
		ln.Close()
		<-accepted
		require.NoError(tb, err)
	}
	s := <-accepted
	require.NotNil(tb, s, "accept")
	tb.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}
