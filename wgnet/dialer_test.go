package wgnet_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/wgnet"
)

// A Dialer is all three ways out a relay looks for.
var (
	_ proxy.ContextDialer    = (*wgnet.Dialer)(nil)
	_ forward.PacketListener = (*wgnet.Dialer)(nil)
	_ forward.PingListener   = (*wgnet.Dialer)(nil)
)

// TestDialer: each of a Dialer's sockets reaches side B through the
// tunnel: a TCP echo, a UDP echo through an unbound ListenPacket, and a
// ping through ListenPing, whose identifier the stack sets.
func TestDialer(t *testing.T) {
	tnetA, tnetB := ustackPair(t)
	d := tnetA.Dialer()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()

	ln, err := tnetB.ListenTCP(&net.TCPAddr{Port: 7})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(addrB, 7).String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("tcp"))
	require.NoError(t, err)
	buf := make([]byte, 1500)
	_, err = io.ReadFull(c, buf[:3])
	require.NoError(t, err)
	require.Equal(t, "tcp", string(buf[:3]))

	us, err := tnetB.ListenUDPAddrPort(netip.AddrPortFrom(addrB, 7))
	require.NoError(t, err)
	defer us.Close()
	go func() {
		b := make([]byte, 1500)
		for {
			n, from, err := us.ReadFrom(b)
			if err != nil {
				return
			}
			us.WriteTo(b[:n], from)
		}
	}()
	pc, err := d.ListenPacket(ctx, "udp4", "")
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("udp"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, 7)))
	require.NoError(t, err)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(dialTimeout))) // a guard against a hang
	n, from, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "udp", string(buf[:n]))
	require.Equal(t, netip.AddrPortFrom(addrB, 7), from.(*net.UDPAddr).AddrPort())
	_, err = d.ListenPacket(ctx, "tcp", "")
	require.Error(t, err, "ListenPacket is UDP's")

	ping, err := d.ListenPing(ctx, "ip4:icmp")
	require.NoError(t, err)
	defer ping.Close()
	req, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: 9, Data: []byte("ping")}}).Marshal(nil)
	require.NoError(t, err)
	_, err = ping.WriteTo(req, &net.IPAddr{IP: addrB.AsSlice()})
	require.NoError(t, err)
	require.NoError(t, ping.SetReadDeadline(time.Now().Add(dialTimeout)))
	n, from, err = ping.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, addrB.String(), from.String())
	reply, err := icmp.ParseMessage(1, buf[:n])
	require.NoError(t, err)
	require.Equal(t, ipv4.ICMPTypeEchoReply, reply.Type)
	require.Equal(t, 9, reply.Body.(*icmp.Echo).Seq)
}
