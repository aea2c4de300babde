package wgnet_test

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/ustack-dev/ustack/wgnet"
)

// TestPing sends an echo request to side B through each way of opening a
// ping socket and sending on it, and reads B's reply.
func TestPing(t *testing.T) {
	tnetA, _ := ustackPair(t)
	write := func(pc *wgnet.PingConn, p []byte) (int, error) { return pc.Write(p) }
	writeTo := func(to net.Addr) func(*wgnet.PingConn, []byte) (int, error) {
		return func(pc *wgnet.PingConn, p []byte) (int, error) { return pc.WriteTo(p, to) }
	}
	for i, tc := range []struct {
		name string
		open func() (*wgnet.PingConn, error)
		send func(*wgnet.PingConn, []byte) (int, error)
	}{
		{"DialPingAddr", func() (*wgnet.PingConn, error) { return tnetA.DialPingAddr(netip.Addr{}, addrB) }, write},
		{"Dial", func() (*wgnet.PingConn, error) {
			c, err := tnetA.Dial("ping4", addrB.String())
			if err != nil {
				return nil, err
			}
			return c.(*wgnet.PingConn), nil
		}, write},
		{"bound and dialed", func() (*wgnet.PingConn, error) { return tnetA.DialPingAddr(addrA, addrB) }, write},
		{"ListenPingAddr to a *PingAddr", func() (*wgnet.PingConn, error) { return tnetA.ListenPingAddr(addrA) },
			writeTo(wgnet.PingAddrFromAddr(addrB))},
		{"ListenPing any to a *net.IPAddr", func() (*wgnet.PingConn, error) {
			return tnetA.ListenPing(wgnet.PingAddrFromAddr(netip.IPv4Unspecified()))
		}, writeTo(&net.IPAddr{IP: addrB.AsSlice()})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := tc.open()
			require.NoError(t, err)
			defer pc.Close()
			seq := 100 + i
			req, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: seq, Data: []byte("wgnet")}}).Marshal(nil)
			require.NoError(t, err)
			_, err = tc.send(pc, req)
			require.NoError(t, err)
			// A guard against a hang, not a timing.
			require.NoError(t, pc.SetReadDeadline(time.Now().Add(dialTimeout)))
			buf := make([]byte, 1500)
			n, from, err := pc.ReadFrom(buf)
			require.NoError(t, err)
			require.Equal(t, addrB, from.(*wgnet.PingAddr).Addr())
			reply, err := icmp.ParseMessage(1, buf[:n])
			require.NoError(t, err)
			require.Equal(t, ipv4.ICMPTypeEchoReply, reply.Type)
			echo := reply.Body.(*icmp.Echo)
			require.Equal(t, seq, echo.Seq)
			require.Equal(t, "wgnet", string(echo.Data))
		})
	}
}

// TestPingErrors: what a ping socket refuses, and how its deadline and
// Close end a read.
func TestPingErrors(t *testing.T) {
	s, tnet := ustackSide(t, addrA, nil)
	t.Cleanup(func() { s.tun.Close() })
	_, err := tnet.DialPingAddr(netip.Addr{}, netip.Addr{})
	require.Error(t, err, "no address")
	_, err = tnet.DialPingAddr(addrA, netip.MustParseAddr("fd00::2"))
	require.Error(t, err, "two IP versions")

	pc, err := tnet.ListenPingAddr(addrA)
	require.NoError(t, err)
	defer pc.Close()
	require.Equal(t, "ping4", pc.LocalAddr().Network())
	require.Equal(t, addrA.String(), pc.LocalAddr().String())
	_, err = pc.WriteTo([]byte{8, 0, 0, 0, 0, 0, 0, 0}, &net.UDPAddr{IP: addrB.AsSlice()})
	require.Error(t, err, "not a ping address")
	_, err = pc.WriteTo([]byte{8, 0, 0, 0, 0, 0, 0, 0}, wgnet.PingAddrFromAddr(netip.MustParseAddr("fd00::2")))
	require.Error(t, err, "an IPv6 destination for an IPv4 socket")

	require.NoError(t, pc.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = pc.Read(make([]byte, 64))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	require.NoError(t, pc.SetReadDeadline(time.Time{}))
	read := make(chan error, 1)
	go func() {
		_, err := pc.Read(make([]byte, 64))
		read <- err
	}()
	require.NoError(t, pc.Close())
	select {
	case err := <-read:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(dialTimeout):
		t.Fatal("Close did not end the read")
	}
}
