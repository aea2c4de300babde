package stack_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/net/nettest"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// acceptOne accepts one conn from ln in the background; nil if Accept
// failed.
func acceptOne(ln net.Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	return accepted
}

// echoOnce checks that bytes written on one conn arrive on the other,
// both ways.
func echoOnce(t *testing.T, a, b net.Conn) {
	t.Helper()
	for _, dir := range [][2]net.Conn{{a, b}, {b, a}} {
		msg := fmt.Sprintf("from %v to %v", dir[0].LocalAddr(), dir[0].RemoteAddr())
		require.NoError(t, dir[1].SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err := dir[0].Write([]byte(msg))
		require.NoError(t, err)
		buf := make([]byte, len(msg))
		_, err = io.ReadFull(dir[1], buf)
		require.NoError(t, err)
		require.Equal(t, msg, string(buf))
	}
}

// echoPackets echoes datagrams on pc until the test ends, when it closes
// pc and waits for the echo to stop.
func echoPackets(t *testing.T, pc net.PacketConn) {
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		xfer.EchoPackets(pc)
	}()
}

// TestNetTestConnDialListen runs x/net's conformance suite on conns from
// DialContext and Listen, over IPv4 and IPv6. (The conns are DialTCP's,
// which TestNetTestConn and its cache and busy-polling variants cover
// in every configuration.)
func TestNetTestConnDialListen(t *testing.T) {
	for _, tc := range []struct {
		network string
		server  netip.Addr
	}{{"tcp4", stacktest.B4}, {"tcp6", stacktest.B6}} {
		t.Run(tc.network, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				p, err := stacktest.Build(nil)
				if err != nil {
					return nil, nil, nil, err
				}
				ln, err := p.B.Listen(tc.network, ":0")
				if err != nil {
					p.Close()
					return nil, nil, nil, err
				}
				defer ln.Close()
				accepted := acceptOne(ln)
				port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
				c1, err = p.A.DialContext(context.Background(), tc.network, netip.AddrPortFrom(tc.server, port).String())
				if err != nil {
					p.Close()
					return nil, nil, nil, err
				}
				if c2 = <-accepted; c2 == nil {
					c1.Close()
					p.Close()
					return nil, nil, nil, errors.New("accept failed")
				}
				return c1, c2, func() { c1.Close(); c2.Close(); p.Close() }, nil
			})
		})
	}
}

// TestDialContextReturnsStackConns checks that DialContext and Listen hand
// out the stack's own conns (with its cache), not bare gonet ones.
func TestDialContextReturnsStackConns(t *testing.T) {
	p := stacktest.New(t, nil)
	ln, err := p.B.Listen("tcp", "198.18.0.2:80")
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	c, err := p.A.DialContext(t.Context(), "tcp", "198.18.0.2:80")
	require.NoError(t, err)
	defer c.Close()
	sc := <-accepted
	require.NotNil(t, sc)
	defer sc.Close()
	require.NotNil(t, stack.EndpointOf(c), "a dialed conn is the stack's")
	require.NotNil(t, stack.EndpointOf(sc), "an accepted conn is the stack's")
	pc, err := p.A.ListenPacket("udp", ":0")
	require.NoError(t, err)
	defer pc.Close()
	require.NotNil(t, stack.EndpointOf(pc.(net.Conn)), "a packet conn is the stack's")
	require.Implements(t, (*stack.TCPConn)(nil), c, "a TCP conn from DialContext can half-close")
	require.Implements(t, (*stack.TCPConn)(nil), sc, "an accepted TCP conn can half-close")
}

func TestHTTPOverStack(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			p := stacktest.New(t, nil)
			ln, err := p.B.Listen("tcp", netip.AddrPortFrom(f.server, 80).String())
			require.NoError(t, err)
			srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s asked for %s", r.RemoteAddr, r.URL.Path)
			})}}
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{DialContext: p.A.DialContext}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for range 3 { // the second and third reuse the conn
				resp, err := client.Get(srv.URL + "/hello")
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Contains(t, string(body), f.client.String())
				require.Contains(t, string(body), "asked for /hello")
			}
		})
	}
}

func TestListenPacketUDP(t *testing.T) {
	for _, tc := range []struct {
		network      string
		client, srv  string
		serverAddr   netip.Addr
		clientSource netip.Addr
	}{
		{"udp4", ":0", "198.18.0.2:7", stacktest.B4, stacktest.A4},
		{"udp6", "[fd00::1]:0", "[fd00::2]:7", stacktest.B6, stacktest.A6},
		{"udp", "", "[::]:7", stacktest.B4, stacktest.A4}, // dual stack, IPv4 through [::]
		{"udp", ":0", ":7", stacktest.B6, stacktest.A6},
	} {
		t.Run(tc.network+" "+tc.srv, func(t *testing.T) {
			p := stacktest.New(t, nil)
			srv, err := p.B.ListenPacket(tc.network, tc.srv)
			require.NoError(t, err)
			echoPackets(t, srv)
			if tc.client == "" {
				tc.client = ":0"
			}
			c, err := p.A.ListenPacket(tc.network, tc.client)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(tc.serverAddr, 7))
			_, err = c.WriteTo([]byte("ping"), to)
			require.NoError(t, err)
			buf := make([]byte, 16)
			n, from, err := c.ReadFrom(buf)
			require.NoError(t, err)
			require.Equal(t, "ping", string(buf[:n]))
			require.Equal(t, tc.serverAddr, from.(*net.UDPAddr).AddrPort().Addr().Unmap())
		})
	}
}

func TestListenPacketPing(t *testing.T) {
	for _, tc := range []struct {
		network string
		local   string
		dst     netip.Addr
		proto   int
		echo    icmp.Type
		reply   icmp.Type
	}{
		{"ip4:icmp", "", stacktest.B4, 1, ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply},
		{"ip4:1", "198.18.0.1", stacktest.B4, 1, ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply},
		{"ip6:ipv6-icmp", "", stacktest.B6, 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply},
		{"ip6:58", "fd00::1", stacktest.B6, 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply},
	} {
		t.Run(tc.network, func(t *testing.T) {
			p := stacktest.New(t, nil)
			c, err := p.A.ListenPacket(tc.network, tc.local)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			for seq := 1; seq <= 3; seq++ {
				data := fmt.Appendf(nil, "ustack ping %d", seq)
				req, err := (&icmp.Message{Type: tc.echo, Body: &icmp.Echo{Seq: seq, Data: data}}).Marshal(nil)
				require.NoError(t, err)
				_, err = c.WriteTo(req, &net.IPAddr{IP: tc.dst.AsSlice()})
				require.NoError(t, err)
				buf := make([]byte, 1500)
				n, from, err := c.ReadFrom(buf)
				require.NoError(t, err)
				require.Equal(t, tc.dst.String(), from.String())
				m, err := icmp.ParseMessage(tc.proto, buf[:n])
				require.NoError(t, err)
				require.Equal(t, tc.reply, m.Type)
				echo, ok := m.Body.(*icmp.Echo)
				require.True(t, ok)
				require.Equal(t, seq, echo.Seq)
				require.Equal(t, data, echo.Data)
			}
		})
	}
}

// TestDialPing dials an ICMP echo socket: Write and Read talk to the
// dialed host only.
func TestDialPing(t *testing.T) {
	p := stacktest.New(t, nil)
	c, err := p.A.DialContext(t.Context(), "ip4:icmp", stacktest.B4.String())
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, stacktest.B4.String(), c.RemoteAddr().String())
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	req, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{Seq: 7, Data: []byte("hi")}}).Marshal(nil)
	require.NoError(t, err)
	_, err = c.Write(req)
	require.NoError(t, err)
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	require.NoError(t, err)
	m, err := icmp.ParseMessage(1, buf[:n])
	require.NoError(t, err)
	require.Equal(t, ipv4.ICMPTypeEchoReply, m.Type)
}

// TestPingConnDeadlineAndClose checks that a read on an ICMP socket ends
// with a timeout at its deadline, and with net.ErrClosed when the socket
// is closed under it.
func TestPingConnDeadlineAndClose(t *testing.T) {
	p := stacktest.New(t, nil)
	c, err := p.A.ListenPacket("ip4:icmp", "")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, _, err = c.ReadFrom(make([]byte, 64))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a read past its deadline times out: %v", err)

	require.NoError(t, c.SetReadDeadline(time.Time{}))
	read := make(chan error, 1)
	go func() {
		_, _, err := c.ReadFrom(make([]byte, 64))
		read <- err
	}()
	require.Eventually(t, func() bool { return stack.Waiting(c, waiter.EventIn) }, 10*time.Second, 100*time.Microsecond,
		"the read never waited")
	require.NoError(t, c.Close())
	select {
	case err := <-read:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read")
	}
	_, err = c.WriteTo([]byte{8, 0, 0, 0, 0, 0, 0, 1}, &net.IPAddr{IP: stacktest.B4.AsSlice()})
	require.ErrorIs(t, err, net.ErrClosed)
}

func TestDialContextRefused(t *testing.T) {
	p := stacktest.New(t, nil)
	for _, network := range []string{"tcp", "tcp6"} {
		addr := "198.18.0.2:9"
		if network == "tcp6" {
			addr = "[fd00::2]:9"
		}
		_, err := p.A.DialContext(t.Context(), network, addr)
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		require.Equal(t, "dial", op.Op)
		require.Equal(t, network, op.Net)
		require.Equal(t, addr, op.Addr.String())
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
}

func TestDialContextCancel(t *testing.T) {
	p := stacktest.New(t, nil)
	// Nobody has this on-link address: the handshake never completes.
	blackhole := netip.AddrPortFrom(silentAddr, 80).String()

	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := p.A.DialContext(ctx, "tcp", "198.18.0.2:80")
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("during", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opened := p.A.Stats().Counter("TCP.ActiveConnectionOpenings")
		dialed := make(chan error, 1)
		go func() {
			_, err := p.A.DialContext(ctx, "tcp4", blackhole)
			dialed <- err
		}()
		// Cancel once the SYN is out: the dial is in its handshake.
		require.Eventually(t, func() bool { return p.A.Stats().Counter("TCP.ActiveConnectionOpenings") > opened }, 10*time.Second, 100*time.Microsecond,
			"the dial never sent its SYN")
		cancel()
		var err error
		select {
		case err = <-dialed:
		case <-time.After(10 * time.Second):
			t.Fatal("cancelling did not end the dial")
		}
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		require.Equal(t, "tcp4", op.Net)
		require.Equal(t, blackhole, op.Addr.String())
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := p.A.DialContext(ctx, "tcp", blackhole)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "a dial past its deadline times out: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestNetBadArguments(t *testing.T) {
	p := stacktest.New(t, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		network, address, want string
	}{
		{"sctp", "198.18.0.2:80", "unknown network"},
		{"tcp", "198.18.0.2", "missing port"},
		{"tcp", ":80", "missing address"},
		{"tcp", "[fe80::1%eth0]:80", "zones are not supported"},
		{"tcp6", "198.18.0.2:80", "want IPv6"},
		{"tcp4", "[fd00::2]:80", "want IPv4"},
		{"tcp", "198.18.0.2:nosuchservice", "unknown port"},
		{"ip4:tcp", "198.18.0.2", "ICMP echo only"},
		{"ip:icmp", "198.18.0.2", "ICMP echo only"},
		{"ip6:ipv6-icmp", "198.18.0.2", "want IPv6"},
	} {
		_, err := p.A.DialContext(ctx, tc.network, tc.address)
		var op *net.OpError
		require.ErrorAs(t, err, &op, "%s %s", tc.network, tc.address)
		require.Equal(t, "dial", op.Op)
		require.ErrorContains(t, err, tc.want, "%s %s", tc.network, tc.address)
	}
	_, err := p.A.Listen("udp", ":80")
	require.ErrorContains(t, err, "unknown network")
	_, err = p.A.ListenPacket("tcp", ":80")
	require.ErrorContains(t, err, "unknown network")
	_, err = p.A.Listen("tcp4", "[fd00::1]:80")
	require.ErrorContains(t, err, "want IPv4")
	_, err = p.A.Listen("tcp", "198.18.0.1")
	require.ErrorContains(t, err, "missing port")
	ln, err := p.A.Listen("tcp", "198.18.0.1:80")
	require.NoError(t, err)
	defer ln.Close()
	_, err = p.A.Listen("tcp", "198.18.0.1:80")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "listen", op.Op)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	c, err := p.A.ListenPacket("ip4:icmp", "")
	require.NoError(t, err)
	defer c.Close()
	_, err = c.WriteTo([]byte{8, 0, 0, 0, 0, 0, 0, 1}, &net.UDPAddr{IP: stacktest.B4.AsSlice()})
	require.ErrorContains(t, err, "want a *net.IPAddr")
	_, err = c.(net.Conn).Write([]byte{8, 0, 0, 0, 0, 0, 0, 1})
	require.ErrorContains(t, err, "not connected")
}

// TestNamedPort dials a service by name, as Go's net allows.
func TestNamedPort(t *testing.T) {
	p := stacktest.New(t, nil)
	ln, err := p.B.Listen("tcp", "198.18.0.2:http")
	require.NoError(t, err)
	defer ln.Close()
	require.Equal(t, 80, ln.Addr().(*net.TCPAddr).Port)
	accepted := acceptOne(ln)
	c, err := p.A.Dial("tcp", "198.18.0.2:http")
	require.NoError(t, err)
	c.Close()
	if sc := <-accepted; sc != nil {
		sc.Close()
	}
}

func TestNetClosedStack(t *testing.T) {
	s, err := stack.New(nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = s.Dial("tcp", "198.18.0.2:80")
	require.ErrorIs(t, err, stack.ErrClosed)
	_, err = s.Listen("tcp", ":80")
	require.ErrorIs(t, err, stack.ErrClosed)
	_, err = s.ListenPacket("udp", ":53")
	require.ErrorIs(t, err, stack.ErrClosed)
	_, err = s.ListenPacket("ip6:ipv6-icmp", "")
	require.ErrorIs(t, err, stack.ErrClosed)
}

// TestConnResetTranslated resets a connection under a reader that waits
// for data, with and without a read deadline: the error is ECONNRESET.
func TestConnResetTranslated(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			p := stacktest.New(t, nil)
			ln, err := p.B.Listen("tcp", ":80")
			require.NoError(t, err)
			defer ln.Close()
			accepted := acceptOne(ln)
			c, err := p.A.Dial("tcp", "198.18.0.2:80")
			require.NoError(t, err)
			defer c.Close()
			if deadline {
				require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Hour)))
			}
			sc := <-accepted
			require.NotNil(t, sc)
			// Linger 0: Close sends a reset, not a FIN.
			stack.EndpointOf(sc).SocketOptions().SetLinger(tcpip.LingerOption{Enabled: true})
			read := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 16))
				read <- err
			}()
			require.Eventually(t, func() bool { return stack.Waiting(c, waiter.EventIn) }, 10*time.Second, 100*time.Microsecond,
				"the read never waited")
			require.NoError(t, sc.Close())
			select {
			case err = <-read:
			case <-time.After(10 * time.Second):
				t.Fatal("the reset did not end the read")
			}
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			require.Equal(t, "read", op.Op)
			require.ErrorIs(t, err, syscall.ECONNRESET)
		})
	}
}

// TestDialContextLookup: with Options.Lookup the stack's dials resolve
// names through it, asking for the network's IP version, and try the
// addresses in its order; the stack's DNS servers are not asked.
func TestDialContextLookup(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	lookup := func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, network+" "+host)
		mu.Unlock()
		if host != "peer.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{stacktest.B6, stacktest.B4}, nil
	}
	p, err := stacktest.Build(&stacktest.Options{Stack: &stack.Options{Lookup: lookup}})
	require.NoError(t, err)
	defer p.Close()
	ln, err := p.B.Listen("tcp", ":7")
	require.NoError(t, err)
	defer ln.Close()
	for _, tc := range []struct {
		network string
		want    netip.Addr
	}{{"tcp", stacktest.B6}, {"tcp4", stacktest.B4}} {
		accepted := acceptOne(ln)
		c, err := p.A.DialContext(context.Background(), tc.network, "peer.test:7")
		require.NoError(t, err, tc.network)
		require.Equal(t, tc.want, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(), "%s: the first address of the version, in Lookup's order", tc.network)
		c.Close()
		if sc := <-accepted; sc != nil {
			sc.Close()
		}
	}
	_, err = p.A.DialContext(context.Background(), "tcp", "nowhere.test:7")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	require.Equal(t, []string{"ip peer.test", "ip4 peer.test", "ip nowhere.test"}, asked)
}
