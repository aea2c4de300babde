package wgnet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/wgnet"
)

// These functions are shaped like code written against wireguard-go's
// tun/netstack (its README example and wireproxy's use of *netstack.Net):
// that they compile with *wgnet.Net in its place is the point. The tests
// below run them.

func httpGet(tnet *wgnet.Net, url string) (string, error) {
	client := http.Client{Transport: &http.Transport{DialContext: tnet.DialContext}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func httpServe(tnet *wgnet.Net, port int) (io.Closer, error) {
	listener, err := tnet.ListenTCP(&net.TCPAddr{Port: port})
	if err != nil {
		return nil, err
	}
	go http.Serve(listener, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host)
	}))
	return listener, nil
}

func pingOnce(tnet *wgnet.Net, host string) error {
	socket, err := tnet.Dial("ping4", host)
	if err != nil {
		return err
	}
	defer socket.Close()
	req := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: 7, Data: []byte("ping")}}
	b, err := req.Marshal(nil)
	if err != nil {
		return err
	}
	socket.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := socket.Write(b); err != nil {
		return err
	}
	n, err := socket.Read(b[:cap(b)])
	if err != nil {
		return err
	}
	reply, err := icmp.ParseMessage(1, b[:n])
	if err != nil {
		return err
	}
	if reply.Type != ipv4.ICMPTypeEchoReply || reply.Body.(*icmp.Echo).Seq != 7 {
		return fmt.Errorf("got %v, want an echo reply with sequence 7", reply.Type)
	}
	return nil
}

func udpEcho(tnet *wgnet.Net, port int) (net.PacketConn, error) {
	var pc net.PacketConn
	pc, err := tnet.ListenUDP(&net.UDPAddr{Port: port})
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], addr)
		}
	}()
	return pc, nil
}

func TestNetAPI(t *testing.T) {
	tnetA, tnetB := ustackPair(t, addrB)

	t.Run("http over DialContext and ListenTCP", func(t *testing.T) {
		l, err := httpServe(tnetB, 80)
		require.NoError(t, err)
		defer l.Close()
		body, err := httpGet(tnetA, "http://"+addrB.String()+"/")
		require.NoError(t, err)
		require.Equal(t, "hello from "+addrB.String(), body)
	})
	t.Run("ping", func(t *testing.T) {
		require.NoError(t, pingOnce(tnetA, addrB.String()))
	})
	t.Run("udp", func(t *testing.T) {
		pc, err := udpEcho(tnetB, 7)
		require.NoError(t, err)
		defer pc.Close()
		c, err := tnetA.DialUDP(nil, &net.UDPAddr{IP: addrB.AsSlice(), Port: 7})
		require.NoError(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Write([]byte("echo"))
		require.NoError(t, err)
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		require.NoError(t, err)
		require.Equal(t, "echo", string(buf[:n]))
	})
	t.Run("dns", func(t *testing.T) {
		serveDNS(t, tnetB)
		addrs, err := tnetA.LookupHost(svcName)
		require.NoError(t, err)
		require.Equal(t, []string{addrB.String()}, addrs)
		_, err = tnetA.LookupHost("nothing.test")
		var dnsErr *net.DNSError
		require.True(t, errors.As(err, &dnsErr), "%v", err)
		require.True(t, dnsErr.IsNotFound)
		addrs, err = tnetA.LookupHost("198.18.0.9")
		require.NoError(t, err)
		require.Equal(t, []string{"198.18.0.9"}, addrs)

		l, err := httpServe(tnetB, 81)
		require.NoError(t, err)
		defer l.Close()
		body, err := httpGet(tnetA, "http://svc.test:81/")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(body, "hello from svc.test"))
	})
	t.Run("dial errors", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := tnetA.DialContext(ctx, "sctp", "svc.test:1")
		require.Error(t, err)
		_, err = tnetA.DialContext(ctx, "tcp6", addrB.String()+":81")
		require.Error(t, err)
	})
}

func TestBatchSize(t *testing.T) {
	dev, _, err := wgnet.CreateNetTUN([]netip.Addr{addrA}, nil, testMTU)
	require.NoError(t, err)
	defer dev.Close()
	require.Equal(t, wgnet.DefaultBatchSize, dev.BatchSize())
	require.Greater(t, dev.BatchSize(), 1)
	dev2, _, err := wgnet.CreateNetTUNWithOptions([]netip.Addr{addrA}, nil, testMTU, &wgnet.Options{BatchSize: 16, Qdisc: "enqlock"})
	require.NoError(t, err)
	defer dev2.Close()
	require.Equal(t, 16, dev2.BatchSize())
	_, _, err = wgnet.CreateNetTUNWithOptions([]netip.Addr{addrA}, nil, testMTU, &wgnet.Options{Qdisc: "nope"})
	require.Error(t, err)
	_, _, err = wgnet.CreateNetTUN([]netip.Addr{addrA}, nil, 100)
	require.Error(t, err)
}

func TestCloseUnblocksRead(t *testing.T) {
	dev, _, err := wgnet.CreateNetTUN([]netip.Addr{addrA}, nil, testMTU)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := dev.Read([][]byte{make([]byte, 2048)}, make([]int, 1), 0)
		errc <- err
	}()
	require.NoError(t, dev.Close())
	require.ErrorIs(t, <-errc, os.ErrClosed) // what wireguard-go stops its reader on
	_, ok := <-dev.Events()
	require.True(t, ok, "EventUp first")
	_, ok = <-dev.Events()
	require.False(t, ok, "closed after Close")
}

var (
	_ net.Conn       = wgnet.TCPConn(nil)
	_ net.Conn       = wgnet.UDPConn(nil)
	_ net.PacketConn = wgnet.UDPConn(nil)
	_ net.Conn       = (*wgnet.PingConn)(nil)
	_ net.PacketConn = (*wgnet.PingConn)(nil)
)

// TestSameMethodsAsNetstack checks that *wgnet.Net has every method of
// wireguard-go's *netstack.Net, with the same parameters, and that each
// result is the same type or one that serves the same interfaces.
func TestSameMethodsAsNetstack(t *testing.T) {
	theirs, ours := reflect.TypeOf((*netstack.Net)(nil)), reflect.TypeOf((*wgnet.Net)(nil))
	require.NotZero(t, theirs.NumMethod())
	for i := range theirs.NumMethod() {
		m := theirs.Method(i)
		o, ok := ours.MethodByName(m.Name)
		require.True(t, ok, "*wgnet.Net lacks %s", m.Name)
		require.Equal(t, m.Type.NumIn(), o.Type.NumIn(), m.Name)
		for j := 1; j < m.Type.NumIn(); j++ {
			want, got := m.Type.In(j), o.Type.In(j)
			if want.String() == "*netstack.PingAddr" {
				want = reflect.TypeOf((*wgnet.PingAddr)(nil))
			}
			require.Equal(t, want, got, "%s parameter %d", m.Name, j)
		}
		require.Equal(t, m.Type.NumOut(), o.Type.NumOut(), m.Name)
		for j := range m.Type.NumOut() {
			want, got := m.Type.Out(j), o.Type.Out(j)
			for _, iface := range []reflect.Type{
				reflect.TypeOf((*net.Conn)(nil)).Elem(),
				reflect.TypeOf((*net.Listener)(nil)).Elem(),
				reflect.TypeOf((*net.PacketConn)(nil)).Elem(),
				reflect.TypeOf((*error)(nil)).Elem(),
			} {
				if want.Implements(iface) {
					require.True(t, got.Implements(iface), "%s result %d: %v is not a %v", m.Name, j, got, iface)
				}
			}
		}
	}
}

// TestTransparent: forward.New takes the stack of a Net built with
// Options.Transparent (Example_exitNode relays through one) and refuses
// a default Net's.
func TestTransparent(t *testing.T) {
	for _, transparent := range []bool{false, true} {
		dev, tnet, err := wgnet.CreateNetTUNWithOptions([]netip.Addr{addrA}, nil, testMTU, &wgnet.Options{Transparent: transparent})
		require.NoError(t, err)
		require.Equal(t, transparent, tnet.Stack().Transparent())
		fw, err := forward.New(tnet.Stack(), forward.Relay(&net.Dialer{}, nil), nil)
		if transparent {
			require.NoError(t, err)
			require.NoError(t, fw.Close())
		} else {
			require.ErrorIs(t, err, stack.ErrNotTransparent)
		}
		require.NoError(t, dev.Close())
	}
}
