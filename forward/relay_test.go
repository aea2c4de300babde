package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// gateway stands for the host's loopback in the relay tests.
var gateway = netip.MustParseAddr("203.0.113.1")

func TestRelayHostSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo until the relay half-closes
		c.(*net.TCPConn).CloseWrite()
		served <- err
	}()
	uc := udpEcho(t)

	pol := &Policy{
		HostLoopback:      []netip.Addr{gateway},
		AllowHostLoopback: true,
		Deny:              []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")},
	}
	e := newEnv(t, Relay(&net.Dialer{}, pol), nil)
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	// TCP: the relay carries a checked exchange and the half-close.
	c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, port))
	require.NoError(t, err)
	const size = 4 << 20
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, xfer.Pattern(3, size))
		if err == nil {
			err = c.CloseWrite()
		}
		sent <- err
	}()
	got, n, err := xfer.Sum(c)
	require.NoError(t, err)
	require.NoError(t, recv(t, sent, "the send ends"))
	want, _, _ := xfer.Sum(xfer.Pattern(3, size))
	require.Equal(t, int64(size), n)
	require.Equal(t, want, got, "the echo came back intact")
	require.NoError(t, recv(t, served, "the echo server ends"))
	c.Close()
	require.Eventually(t, func() bool { return e.fw.Stats().TCPFlows == 0 }, 10*time.Second, time.Millisecond)
	st := e.fw.Stats()
	require.Equal(t, uint64(size), st.TCPBytesUp)
	require.Equal(t, uint64(size), st.TCPBytesDown)

	// Refusals by policy are resets, counted by reason.
	_, err = e.A.DialTCP(context.Background(), netip.MustParseAddrPort("203.0.113.200:80"))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), e.fw.Stats().Refused[Denied])
	// A closed port on the host: a reset, counted as a failed connect.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := uint16(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	_, err = e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, closedPort))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), e.fw.Stats().ConnectFailed)

	// UDP through a host socket; the reply from 127.0.0.1 comes from the
	// gateway.
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	dst := netip.AddrPortFrom(gateway, uint16(uc.LocalAddr().(*net.UDPAddr).Port))
	_, err = pc.WriteTo([]byte("hello"), net.UDPAddrFromAddrPort(dst))
	require.NoError(t, err)
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 100)
	n2, from, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n2]))
	require.Equal(t, dst, from.(*net.UDPAddr).AddrPort())
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.200:53")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.fw.Stats().Refused[Denied] == 2 }, 10*time.Second, time.Millisecond, "a denied datagram is counted")
}

func TestRelayHostLoopbackRefused(t *testing.T) {
	e := newEnv(t, Relay(&net.Dialer{}, &Policy{HostLoopback: []netip.Addr{gateway}}), nil)
	_, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, 80))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), e.fw.Stats().Refused[HostLoopback])
}

// tcpOnly is a dialer that is not a *net.Dialer and cannot carry UDP, as
// a SOCKS5 client without UDP ASSOCIATE.
type tcpOnly struct{ d net.Dialer }

func (t *tcpOnly) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := t.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return proxied{c.(*net.TCPConn)}, nil // not a *net.TCPConn: the generic copy
}

// proxied is a conn a proxy dialer returns: it half-closes, but it is not
// a host socket of ours.
type proxied struct{ *net.TCPConn }

func TestRelayGenericDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	}()
	e := newEnv(t, Relay(&tcpOnly{}, &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}), nil)
	c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, uint16(ln.Addr().(*net.TCPAddr).Port)))
	require.NoError(t, err)
	defer c.Close()
	const size = 1 << 20
	go func() {
		io.Copy(c, xfer.Pattern(4, size))
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, n, err := xfer.Sum(c)
	require.NoError(t, err)
	want, _, _ := xfer.Sum(xfer.Pattern(4, size))
	require.Equal(t, int64(size), n)
	require.Equal(t, want, got)

	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(gateway, 53)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.fw.Stats().Refused[Unsupported] == 1 }, 10*time.Second, time.Millisecond,
		"UDP through a TCP-only dialer is refused and counted")
}

// udpEcho is a UDP echo server on the host's 127.0.0.1, sending every
// datagram back to its sender until the test ends.
func udpEcho(t *testing.T) *net.UDPConn {
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { uc.Close(); <-done })
	go func() {
		defer close(done)
		xfer.EchoPackets(uc)
	}()
	return uc
}

// listenDialer is a dialer with ListenPacket (PacketListener) that is not
// a *net.Dialer: Relay carries UDP through its packet conns.
type listenDialer struct {
	net.Dialer
	net.ListenConfig
}

// TestUDPRefusalIsICMP checks that a refused datagram is answered with an
// ICMP port unreachable, so the peer's connected socket fails with
// ECONNREFUSED rather than waiting: refused by policy (in the relay), by a
// limit (the Forwarder) and for a dialer that cannot carry UDP.
func TestUDPRefusalIsICMP(t *testing.T) {
	denied, denied6 := netip.MustParseAddrPort("203.0.113.200:53"), netip.MustParseAddrPort("[fd00:203::c8]:53")
	for _, tc := range []struct {
		name   string
		d      proxy.ContextDialer
		o      *Options
		dst    netip.AddrPort
		busy   bool // another socket holds the one flow allowed
		reason Reason
	}{
		{"policy", &net.Dialer{}, nil, denied, false, Denied},
		{"policy-ipv6", &net.Dialer{}, nil, denied6, false, Denied},
		{"policy-packet-listener", &listenDialer{}, nil, denied, false, Denied},
		{"no-udp-dialer", &tcpOnly{}, nil, denied, false, Denied},
		{"limit", &net.Dialer{}, &Options{MaxUDP: 1}, denied, true, UDPLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deny := []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25"), netip.MustParsePrefix("fd00:203::80/121")}
			e := newEnv(t, Relay(tc.d, &Policy{Deny: deny}), tc.o)
			dst := tc.dst
			if tc.busy {
				hold, err := e.A.DialUDP(netip.AddrPort{}, netip.MustParseAddrPort("203.0.113.5:53"))
				require.NoError(t, err)
				defer hold.Close()
				_, err = hold.Write([]byte("x"))
				require.NoError(t, err)
				require.Eventually(t, func() bool { return e.fw.Stats().UDPFlows == 1 }, 10*time.Second, time.Millisecond)
				dst = netip.MustParseAddrPort("203.0.113.6:53")
			}
			c, err := e.A.DialUDP(netip.AddrPort{}, dst)
			require.NoError(t, err)
			defer c.Close()
			// gVisor's UDP socket holds the error for the next call but
			// does not wake a read already waiting: read once it came.
			// (A's new IPv6 address drops what it sends until duplicate
			// address detection ends: send until it goes.)
			counter := "ICMP.V4.PacketsReceived.DstUnreachable"
			if dst.Addr().Is6() {
				counter = "ICMP.V6.PacketsReceived.DstUnreachable"
			}
			require.Eventually(t, func() bool {
				if e.A.Stats().Counter(counter) > 0 {
					return true
				}
				c.Write([]byte("query"))
				return false
			}, 10*time.Second, 10*time.Millisecond, "A got an ICMP error")
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = c.Read(make([]byte, 100))
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			require.NotZero(t, e.fw.Stats().Refused[tc.reason])
		})
	}
}

// socketLog records the sockets a Control function saw.
type socketLog struct {
	mu   sync.Mutex
	seen []string // network and address
}

func (l *socketLog) control(network, address string, _ syscall.RawConn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, network+" "+address)
	return nil
}

// count is how many sockets of network (a prefix) to address were seen.
func (l *socketLog) count(network, address string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.seen {
		nw, a, _ := strings.Cut(s, " ")
		if strings.HasPrefix(nw, network) && a == address {
			n++
		}
	}
	return n
}

// has reports whether a socket of network (a prefix: "tcp", "udp",
// "ip4:icmp") was seen, to address if it is not "".
func (l *socketLog) has(network, address string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen {
		n, a, _ := strings.Cut(s, " ")
		if strings.HasPrefix(n, network) && (address == "" || a == address) {
			return true
		}
	}
	return false
}

func (l *socketLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.seen, ", ")
}

// TestRelayHonoursDialer checks that every host socket Relay opens goes
// through its *net.Dialer's Control: TCP, UDP, the ping sockets and DNS
// over TCP (a VPN client marks its sockets there, to keep them out of its
// own tunnel).
func TestRelayHonoursDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // the DNS upstream gives no answer: the socket is what counts
			accepted <- struct{}{}
		}
	}()
	uc := udpEcho(t)
	pol := Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	for _, ctl := range []string{"Control", "ControlContext"} {
		t.Run(ctl, func(t *testing.T) {
			var log socketLog
			d := &net.Dialer{Control: log.control}
			if ctl == "ControlContext" {
				d = &net.Dialer{ControlContext: func(ctx context.Context, network, address string, c syscall.RawConn) error {
					if ctx == nil {
						return errors.New("ControlContext without a context")
					}
					return log.control(network, address, c)
				}}
			}
			e := newEnv(t, Relay(d, &pol), nil)
			tcpAddr := ln.Addr().(*net.TCPAddr).AddrPort()
			c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, tcpAddr.Port()))
			require.NoError(t, err)
			c.Close()
			recv(t, accepted, "the host listener accepts the relayed connection")
			require.True(t, log.has("tcp", tcpAddr.String()), "TCP: %s", &log)

			pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
			require.NoError(t, err)
			defer pc.Close()
			_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(gateway, uint16(uc.LocalAddr().(*net.UDPAddr).Port))))
			require.NoError(t, err)
			require.NoError(t, pc.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, _, err = pc.ReadFrom(make([]byte, 10))
			require.NoError(t, err, "the echo came back")
			require.True(t, log.has("udp", ""), "UDP: %s", &log)

			if err := e.fw.OpenPing(); err != nil {
				testenv.Skip(t, "this process may open no ICMP socket: %v", err)
			}
			require.True(t, log.has("ip4", ""), "ICMPv4: %s", &log)
			require.True(t, log.has("ip6", ""), "ICMPv6: %s", &log)

			// DNS over TCP, where UDP is not carried.
			dns := netip.MustParseAddr("203.0.113.53")
			e2 := newEnv(t, Relay(d, &Policy{NoUDP: true, DNS: []DNSRelay{{Addr: dns, Upstream: tcpAddr}}}), nil)
			q, err := e2.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(dns, 53))
			require.NoError(t, err)
			defer q.Close()
			_, err = q.Write(make([]byte, 32)) // a DNS header's worth
			require.NoError(t, err)
			recv(t, accepted, "the DNS upstream accepts the query's connection")
			require.Equal(t, uint64(1), e2.fw.Stats().DNSQueries)
			require.Equal(t, 2, log.count("tcp", tcpAddr.String()), "TCP and DNS over TCP: %s", &log)
			t.Logf("sockets: %s", &log)
		})
	}
}

// TestRelayLocalAddrUDP checks that the relay's UDP host sockets are bound
// to the address of its *net.Dialer's LocalAddr.
func TestRelayLocalAddrUDP(t *testing.T) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer srv.Close()
	from := make(chan netip.AddrPort, 1)
	go func() {
		buf := make([]byte, 100)
		_, a, err := srv.ReadFromUDPAddrPort(buf)
		if err == nil {
			from <- a
		}
	}()
	local := netip.MustParseAddr("127.0.0.2") // a loopback address, not the default source
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}
	e := newEnv(t, Relay(d, &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}), nil)
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(gateway, uint16(srv.LocalAddr().(*net.UDPAddr).Port))))
	require.NoError(t, err)
	got := recv(t, from, "the host server gets the datagram")
	require.Equal(t, local, got.Addr().Unmap(), "the relay's socket is bound to the dialer's local address")
}

// netstackNet has the UDP method of a userspace network (wireguard-go's
// tun/netstack.Net): a concrete result, no ListenPacket.
type netstackNet struct {
	net.Dialer
	listened atomic.Int32
}

func (n *netstackNet) ListenUDP(laddr *net.UDPAddr) (*net.UDPConn, error) {
	n.listened.Add(1)
	return net.ListenUDP("udp", laddr)
}

// netstackAddrPort has wgnet.Net's shape of it.
type netstackAddrPort struct {
	net.Dialer
	listened atomic.Int32
}

func (n *netstackAddrPort) ListenUDPAddrPort(laddr netip.AddrPort) (*net.UDPConn, error) {
	n.listened.Add(1)
	return net.ListenUDP("udp", net.UDPAddrFromAddrPort(laddr))
}

// TestRelayPacketSockets relays UDP through dialers that are not a
// *net.Dialer but have packet sockets: ListenPacket (PacketListener), or
// a userspace network's ListenUDP or ListenUDPAddrPort. One socket per
// flow carries every datagram of it, full cone.
func TestRelayPacketSockets(t *testing.T) {
	ns, nsap := &netstackNet{}, &netstackAddrPort{}
	for _, tc := range []struct {
		name     string
		d        proxy.ContextDialer
		listened func() int32 // sockets the dialer opened, if it tells
	}{
		{"ListenPacket", &listenDialer{}, nil},
		{"ListenUDP", ns, ns.listened.Load},
		{"ListenUDPAddrPort", nsap, nsap.listened.Load},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uc := udpEcho(t)
			e := newEnv(t, Relay(tc.d, &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}), nil)
			pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
			require.NoError(t, err)
			defer pc.Close()
			dst := netip.AddrPortFrom(gateway, uint16(uc.LocalAddr().(*net.UDPAddr).Port))
			buf := make([]byte, 100)
			for _, msg := range []string{"one", "two"} {
				_, err = pc.WriteTo([]byte(msg), net.UDPAddrFromAddrPort(dst))
				require.NoError(t, err)
				require.NoError(t, pc.SetReadDeadline(time.Now().Add(30*time.Second)))
				n, from, err := pc.ReadFrom(buf)
				require.NoError(t, err)
				require.Equal(t, msg, string(buf[:n]))
				require.Equal(t, dst, from.(*net.UDPAddr).AddrPort())
			}
			require.Equal(t, uint64(1), e.fw.Stats().UDPOpened, "one flow for the socket")
			if tc.listened != nil {
				require.Equal(t, int32(1), tc.listened(), "one socket for the flow")
			}
			require.Zero(t, e.fw.Stats().Refused[Unsupported])
		})
	}
}
