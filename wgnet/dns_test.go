package wgnet_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/wgnet"
)

// The names the tunnel's DNS server (serveDNS, on side B) knows; every
// other name does not exist.
const (
	svcName   = "svc.test"   // addrB
	mixedName = "mixed.test" // two A and two AAAA, interleaved
	bigName   = "big.test"   // 40 A: more than a plain DNS datagram carries
	multiName = "multi.test" // silentAddr, then addrB
	// localhost is in the host's /etc/hosts (127.0.0.1); the tunnel's
	// server gives it addresses of the tunnel's.
	localName = "localhost"
)

// silentAddr is routed into the tunnel, where no peer takes it: a DNS
// server or TCP service there never answers.
var silentAddr = netip.MustParseAddr("198.18.0.99")

var (
	mixed4 = []netip.Addr{netip.MustParseAddr("198.18.5.2"), netip.MustParseAddr("198.18.5.1")}
	mixed6 = []netip.Addr{netip.MustParseAddr("fd00::5:2"), netip.MustParseAddr("fd00::5:1")}
	local  = []netip.Addr{netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("fd00::7")}
)

// bigAddrs is what bigName resolves to: 40 A records, more than the 512
// bytes dnstest.MaxUDP lets an answer over UDP carry, so the server
// answers truncated over UDP and fully over TCP.
var bigAddrs = func() []netip.Addr {
	var as []netip.Addr
	for i := range 40 {
		as = append(as, netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}))
	}
	return as
}()

// serveDNS serves the names above through tnet on port 53 of addrB,
// over UDP and TCP, until the test ends.
func serveDNS(t *testing.T, tnet *wgnet.Net) *dnstest.Server {
	t.Helper()
	d := dnstest.New(dnstest.Zone{
		svcName:   {addrB},
		mixedName: {mixed4[0], mixed6[0], mixed4[1], mixed6[1]},
		bigName:   bigAddrs,
		multiName: {silentAddr, addrB},
		localName: local,
	})
	t.Cleanup(func() { d.Close() })
	pc, err := tnet.ListenUDPAddrPort(netip.AddrPortFrom(addrB, 53))
	require.NoError(t, err)
	d.ServePacket(pc)
	ln, err := tnet.ListenTCPAddrPort(netip.AddrPortFrom(addrB, 53))
	require.NoError(t, err)
	d.ServeStream(ln)
	return d
}

func strs(as ...[]netip.Addr) []string {
	var s []string
	for _, a := range as {
		for _, x := range a {
			s = append(s, x.String())
		}
	}
	return s
}

// TestLookupLikeNetstack resolves the same names through wgnet and
// through wireguard-go's netstack, each as the client of the same
// server, with an IPv4 address alone and with both versions: the answers
// must be wireguard-go's, and both must be the ones expected (AAAA
// first when the client has IPv6, each in the server's order; a
// truncated answer asked again over TCP; "localhost" asked of the
// tunnel's server, not taken from the host's /etc/hosts; a missing name
// not found).
func TestLookupLikeNetstack(t *testing.T) {
	type answer struct {
		addrs    []string
		notFound bool
	}
	for _, tc := range []struct {
		name  string
		addrs []netip.Addr
		want  map[string]answer
	}{
		{"ipv4", []netip.Addr{addrA}, map[string]answer{
			mixedName:    {addrs: strs(mixed4)},
			bigName:      {addrs: strs(bigAddrs)},
			localName:    {addrs: strs(local[:1])},
			"198.18.0.9": {addrs: []string{"198.18.0.9"}},
			"none.test":  {notFound: true},
		}},
		{"dual-stack", []netip.Addr{addrA, netip.MustParseAddr("fd00::1")}, map[string]answer{
			mixedName:   {addrs: strs(mixed6, mixed4)},
			bigName:     {addrs: strs(bigAddrs)},
			localName:   {addrs: strs(local[1:], local[:1])},
			"fd00::9":   {addrs: []string{"fd00::9"}},
			"none.test": {notFound: true},
		}},
	} {
		for _, impl := range impls {
			t.Run(tc.name+"/"+impl, func(t *testing.T) {
				var a side
				if impl == "ustack" {
					a, _ = ustackSideWith(t, tc.addrs, nil, addrB)
				} else {
					a = netstackSideWith(t, tc.addrs, addrB)
				}
				b, tnetB := ustackSide(t, addrB, nil)
				join(t, a, b)
				d := serveDNS(t, tnetB)
				ctx, cancel := context.WithTimeout(t.Context(), dialTimeout)
				defer cancel()
				got := map[string]answer{}
				for name := range tc.want {
					addrs, err := a.lookup(ctx, name)
					var dnsErr *net.DNSError
					if err != nil {
						require.ErrorAs(t, err, &dnsErr, "%s", name)
					}
					got[name] = answer{addrs: addrs, notFound: dnsErr != nil && dnsErr.IsNotFound}
				}
				require.Equal(t, tc.want, got)
				require.NotZero(t, d.TCPQueries(), "the truncated answer is asked again over TCP")
			})
		}
	}
}

// TestLookupNextServer gives the client a first server that never
// answers: each query falls to the second. With the silent one alone,
// the lookup fails with a timeout naming it.
func TestLookupNextServer(t *testing.T) {
	tnetA, tnetB := ustackPair(t, silentAddr, addrB)
	serveDNS(t, tnetB)
	// Short, so that the test does not wait dnsTimeout for the silent
	// server twice; the second server answers in milliseconds.
	wgnet.SetDNSTimeout(tnetA, time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), dialTimeout)
	defer cancel()
	addrs, err := tnetA.LookupContextHost(ctx, svcName)
	require.NoError(t, err)
	require.Equal(t, []string{addrB.String()}, addrs)

	tnetAlone, _ := ustackPair(t, silentAddr)
	wgnet.SetDNSTimeout(tnetAlone, 100*time.Millisecond)
	_, err = tnetAlone.LookupContextHost(ctx, svcName)
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	require.True(t, dnsErr.IsTimeout, "%v", err)
	require.Equal(t, silentAddr.String(), dnsErr.Server)
}

// TestDialContextTriesEachAddress dials a name whose first address never
// answers: within its share of the deadline the dial gives up on it and
// connects to the second.
func TestDialContextTriesEachAddress(t *testing.T) {
	tnetA, tnetB := ustackPair(t, addrB)
	serveDNS(t, tnetB)
	ln, err := tnetB.ListenTCPAddrPort(netip.AddrPortFrom(addrB, 82))
	require.NoError(t, err)
	defer ln.Close()
	// Long enough for two shares of at least minAttempt (2 s); the dial
	// to addrB itself takes milliseconds.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	c, err := tnetA.DialContext(ctx, "tcp", net.JoinHostPort(multiName, "82"))
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, netip.AddrPortFrom(addrB, 82).String(), c.RemoteAddr().String())

	_, err = tnetA.DialContext(t.Context(), "tcp6", net.JoinHostPort(multiName, "82"))
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.ErrorContains(t, err, "no suitable address")
}
