package dnstest_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ustack-dev/ustack/internal/dnstest"
)

// TestMain checks that every Server the tests closed left no goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	web4 = netip.MustParseAddr("198.18.0.2")
	web6 = netip.MustParseAddr("fd00::2")
)

// bigAddrs are more A records than fit MaxUDP bytes.
func bigAddrs() []netip.Addr {
	var as []netip.Addr
	for i := range 40 {
		as = append(as, netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}))
	}
	return as
}

// serve starts a Server for zone on loopback UDP and TCP (the same
// port), closed when the test ends, and a Go resolver that asks it.
func serve(t *testing.T, zone dnstest.Zone) (*dnstest.Server, *net.Resolver) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	require.NoError(t, err)
	s := dnstest.New(zone)
	s.ServePacket(pc)
	s.ServeStream(ln)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	addr := pc.LocalAddr().String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return s, r
}

func TestLookup(t *testing.T) {
	s, r := serve(t, dnstest.Zone{
		"Web.ustack.test":  {web4, web6},
		"big.ustack.test.": bigAddrs(),
		"v4.ustack.test":   {web4},
	})
	ctx := t.Context()

	v4, err := r.LookupNetIP(ctx, "ip4", "web.ustack.test")
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{web4}, v4)
	v6, err := r.LookupNetIP(ctx, "ip6", "WEB.ustack.test.")
	require.NoError(t, err, "names are matched in any case")
	require.Equal(t, []netip.Addr{web6}, v6)
	require.NotZero(t, s.UDPQueries())
	require.Zero(t, s.TCPQueries(), "answers that fit come over UDP")

	_, err = r.LookupNetIP(ctx, "ip6", "v4.ustack.test")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr, "a name with no address of the family has no answer")

	_, err = r.LookupHost(ctx, "nope.ustack.test")
	require.ErrorAs(t, err, &dnsErr)
	require.True(t, dnsErr.IsNotFound, "a name not in the zone is NXDOMAIN: %v", err)

	big, err := r.LookupNetIP(ctx, "ip4", "big.ustack.test")
	require.NoError(t, err)
	require.ElementsMatch(t, bigAddrs(), big)
	require.NotZero(t, s.TCPQueries(), "an answer over MaxUDP is truncated and asked again over TCP")
}

// TestMalformed: a datagram that is not a query gets no answer, a stream
// that sends one is closed, and both are counted.
func TestMalformed(t *testing.T) {
	s, r := serve(t, dnstest.Zone{"web.ustack.test": {web4}})
	c, err := r.Dial(t.Context(), "tcp", "")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write([]byte{0, 3, 'b', 'a', 'd'})
	require.NoError(t, err)
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err, "the server closes a stream that sends garbage")
	require.Equal(t, int64(1), s.TCPQueries())

	u, err := r.Dial(t.Context(), "udp", "")
	require.NoError(t, err)
	defer u.Close()
	_, err = u.Write([]byte("bad"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.UDPQueries() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, u.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = u.Read(make([]byte, 512))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "no answer to garbage: %v", err)
}

// TestClose: Close ends a stream a client holds open, closes what it was
// given after Close at once, and leaves no goroutine.
func TestClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := dnstest.New(nil)
	s.ServeStream(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte{0}) // half a length: the server waits for more
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err, "Close ended the stream")

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	s.ServePacket(pc)
	_, _, err = pc.ReadFrom(make([]byte, 1))
	require.ErrorIs(t, err, net.ErrClosed, "a socket given to a closed Server is closed")
}
