package stack_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// The names serveDNS knows. Every other name does not exist (NXDOMAIN).
const (
	webName   = "web.ustack.test"   // A B4, AAAA B6
	multiName = "multi.ustack.test" // A 198.18.0.2 then 198.18.0.3
	bigName   = "big.ustack.test"   // 40 A records: too many for UDP
	slowName  = "slow.ustack.test"  // A 198.18.0.77 (nobody: SYNs go unanswered) then B4
)

// silentAddr is on A's and B's link, but no host has it: a SYN to it is
// never answered.
var silentAddr = netip.MustParseAddr("198.18.0.77")

// bigAddrs is what bigName resolves to: more than fits the 512 bytes a
// plain DNS datagram may carry (dnstest.MaxUDP), so the answer must
// come over TCP.
var bigAddrs = func() []netip.Addr {
	var as []netip.Addr
	for i := range 40 {
		as = append(as, netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}))
	}
	return as
}()

// serveDNS serves the names above on st, over its ListenPacket and
// Listen, port 53 of each address given, until the test ends.
func serveDNS(t *testing.T, st *stack.Stack, addrs ...netip.Addr) *dnstest.Server {
	t.Helper()
	d := dnstest.New(dnstest.Zone{
		webName:   {stacktest.B4, stacktest.B6},
		multiName: {stacktest.B4, netip.MustParseAddr("198.18.0.3")},
		bigName:   bigAddrs,
		slowName:  {silentAddr, stacktest.B4},
	})
	t.Cleanup(func() { d.Close() })
	for _, a := range addrs {
		hp := netip.AddrPortFrom(a, stack.DNSPort).String()
		pc, err := st.ListenPacket("udp", hp)
		require.NoError(t, err)
		d.ServePacket(pc)
		ln, err := st.Listen("tcp", hp)
		require.NoError(t, err)
		d.ServeStream(ln)
	}
	return d
}

// dnsPair is a stacktest pair whose host A asks serveDNS on host B.
func dnsPair(t *testing.T, servers ...netip.Addr) (*stacktest.Pair, *dnstest.Server) {
	t.Helper()
	if len(servers) == 0 {
		servers = []netip.Addr{stacktest.B4}
	}
	p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{DNS: servers}})
	return p, serveDNS(t, p.B, stacktest.B4, stacktest.B6)
}

func TestResolver(t *testing.T) {
	p, d := dnsPair(t)
	r := p.A.Resolver()
	ctx := t.Context()

	v4, err := r.LookupNetIP(ctx, "ip4", webName)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{stacktest.B4}, v4)
	v6, err := r.LookupNetIP(ctx, "ip6", webName)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{stacktest.B6}, v6)
	both, err := r.LookupHost(ctx, webName)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{stacktest.B4.String(), stacktest.B6.String()}, both)

	_, err = r.LookupHost(ctx, "nope.ustack.test")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	require.True(t, dnsErr.IsNotFound, "NXDOMAIN is not found: %v", err)

	require.Zero(t, d.TCPQueries(), "answers that fit come over UDP")
	big, err := r.LookupNetIP(ctx, "ip4", bigName)
	require.NoError(t, err)
	require.ElementsMatch(t, bigAddrs, big)
	require.NotZero(t, d.TCPQueries(), "a truncated answer is asked again over TCP")
	require.NotZero(t, d.UDPQueries())
}

// TestResolverNextServer gives A an unreachable first server: the lookup
// is answered by the second.
func TestResolverNextServer(t *testing.T) {
	unreachable := netip.MustParseAddr("203.0.113.53") // no route on A
	p, _ := dnsPair(t, unreachable, stacktest.B6)
	addrs, err := p.A.Resolver().LookupNetIP(t.Context(), "ip4", webName)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{stacktest.B4}, addrs)

	alone, _ := dnsPair(t, unreachable)
	_, err = alone.A.Resolver().LookupNetIP(t.Context(), "ip4", webName)
	require.Error(t, err, "the first server alone cannot answer")
}

func TestResolverWithoutServers(t *testing.T) {
	p := stacktest.New(t, nil)
	_, err := p.A.Resolver().LookupHost(t.Context(), webName)
	require.ErrorContains(t, err, "Options.DNS")
	_, err = p.A.DialContext(t.Context(), "tcp", webName+":80")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "dial", op.Op)
	require.ErrorContains(t, err, "Options.DNS")
}

func TestDialName(t *testing.T) {
	p, _ := dnsPair(t)
	for _, network := range []string{"tcp", "tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			ln, err := p.B.Listen(network, ":0")
			require.NoError(t, err)
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			accepted := acceptOne(ln)
			c, err := p.A.DialContext(t.Context(), network, net.JoinHostPort(webName, strconv.Itoa(port)))
			require.NoError(t, err)
			defer c.Close()
			sc := <-accepted
			require.NotNil(t, sc)
			defer sc.Close()
			got := netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().Unmap()
			switch network {
			case "tcp4":
				require.Equal(t, stacktest.B4, got)
			case "tcp6":
				require.Equal(t, stacktest.B6, got)
			}
			echoOnce(t, c, sc)
		})
	}
}

// TestDialNameTriesEachAddress resolves a name to two addresses of which
// only the second listens: the dial falls through to it. When neither
// listens, the error names the first that failed.
func TestDialNameTriesEachAddress(t *testing.T) {
	p, _ := dnsPair(t)
	second := netip.MustParseAddr("198.18.0.3")
	require.NoError(t, p.B.AddAddress(p.B.Stats().NICs[0].ID, netip.PrefixFrom(second, 24)))

	_, err := p.A.DialContext(t.Context(), "tcp4", multiName+":81")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "tcp4", op.Net)
	require.Equal(t, netip.AddrPortFrom(stacktest.B4, 81).String(), op.Addr.String())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)

	ln, err := p.B.Listen("tcp4", netip.AddrPortFrom(second, 81).String())
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	c, err := p.A.DialContext(t.Context(), "tcp4", multiName+":81")
	require.NoError(t, err)
	defer c.Close()
	sc := <-accepted
	require.NotNil(t, sc)
	defer sc.Close()
	require.Equal(t, netip.AddrPortFrom(second, 81).String(), c.RemoteAddr().String())
}

// TestDialNameSharesDeadline resolves a name to an address that never
// answers and then a live one, and dials it with a deadline: the first
// address gets only its share of the deadline (half of it, for two), so
// the dial still reaches the second in time. Were the first given the
// whole deadline, the dial would fail on it.
func TestDialNameSharesDeadline(t *testing.T) {
	p, _ := dnsPair(t)
	ln, err := p.B.Listen("tcp4", netip.AddrPortFrom(stacktest.B4, 82).String())
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	// 4 s: each address's share is 2 s, the floor a share gets
	// (minAttempt), so the dial takes 2 s and has 2 s left for the live
	// address.
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	c, err := p.A.DialContext(ctx, "tcp4", slowName+":82")
	require.NoError(t, err, "the silent first address took the whole deadline")
	defer c.Close()
	require.Equal(t, netip.AddrPortFrom(stacktest.B4, 82).String(), c.RemoteAddr().String())
	sc := <-accepted
	require.NotNil(t, sc)
	sc.Close()
}

func TestDialUDPName(t *testing.T) {
	p, _ := dnsPair(t)
	srv, err := p.B.ListenPacket("udp", ":7")
	require.NoError(t, err)
	echoPackets(t, srv)
	c, err := p.A.Dial("udp4", webName+":7")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write([]byte("over udp by name"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "over udp by name", string(buf[:n]))
}

// TestResolverNextServerAfterTimeout gives A a first server that never
// answers: the lookup that times out on it makes the second current.
func TestResolverNextServerAfterTimeout(t *testing.T) {
	silent := netip.MustParseAddr("198.18.0.99") // on-link, nobody there
	p, _ := dnsPair(t, silent, stacktest.B4)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := p.A.Resolver().LookupNetIP(ctx, "ip4", webName)
	require.Error(t, err, "the silent server lets the lookup time out")
	addrs, err := p.A.Resolver().LookupNetIP(t.Context(), "ip4", webName)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{stacktest.B4}, addrs)
}
