package sandbox

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestParseForward(t *testing.T) {
	ok := []struct {
		in   string
		want Forward
	}{
		{"8080:80", Forward{Host: netip.MustParseAddrPort("127.0.0.1:8080"), Port: 80}},
		{"0.0.0.0:5353:53/udp", Forward{UDP: true, Host: netip.MustParseAddrPort("0.0.0.0:5353"), Port: 53}},
		{"[::1]:2222:22/tcp", Forward{Host: netip.MustParseAddrPort("[::1]:2222"), Port: 22}},
		{"::1:2222:22", Forward{Host: netip.MustParseAddrPort("[::1]:2222"), Port: 22}},
	}
	for _, tc := range ok {
		f, err := ParseForward(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, f, tc.in)
		back, err := ParseForward(f.String())
		require.NoError(t, err)
		require.Equal(t, f, back, "String round trip of %q", tc.in)
	}
	for _, in := range []string{"", "80", "0:80", "8080:0", "8080:80/sctp", "x:8080:80", "8080:70000", "1.2.3.4:x:80"} {
		_, err := ParseForward(in)
		require.Error(t, err, in)
	}
}

func TestNormalize(t *testing.T) {
	c, err := Config{}.normalize()
	require.NoError(t, err)
	require.Equal(t, DefaultAddr4, c.Addr4)
	require.Equal(t, DefaultGateway6, c.Gateway6)
	require.Equal(t, uint32(DefaultMTU), c.MTU)
	require.Equal(t, DefaultMaxHalfOpen, c.MaxHalfOpen)
	c, err = Config{MaxFlows: -1}.normalize()
	require.NoError(t, err)
	require.Greater(t, c.MaxFlows, 1<<30, "-1 means no limit")

	for name, bad := range map[string]Config{
		"gateway outside":    {Gateway4: netip.MustParseAddr("10.0.0.1")},
		"gateway is sandbox": {Gateway4: DefaultAddr4.Addr()},
		"dns is gateway":     {DNS4: DefaultGateway4},
		"v6 gateway v4":      {Gateway6: DefaultGateway4},
		"mtu":                {MTU: 100},
		"tcp buffer":         {TCPBuffer: 10},
		"v6 forward no v6":   {NoIPv6: true, Forwards: []Forward{{Host: netip.MustParseAddrPort("[::1]:1"), Port: 1}}},
	} {
		_, err := bad.normalize()
		require.Error(t, err, name)
	}
}

func TestPolicy(t *testing.T) {
	c, err := Config{
		Deny:  []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25")},
		Allow: nil,
	}.normalize()
	require.NoError(t, err)
	up := netip.MustParseAddrPort("192.0.2.200:53")
	p := policy{cfg: c, dns: [2]netip.AddrPort{up, up}}
	ap := netip.MustParseAddrPort

	_, _, r, ok := p.target(ap("198.18.0.1:80"))
	require.False(t, ok)
	require.Equal(t, HostLoopback, r)
	_, _, r, ok = p.target(ap("192.0.2.1:80"))
	require.False(t, ok)
	require.Equal(t, Denied, r)
	for _, a := range []string{"169.254.169.254:80", "224.0.0.1:5353", "255.255.255.255:67", "0.0.0.0:1", "[fe80::1]:80", "[ff02::1]:1"} {
		_, _, r, ok = p.target(ap(a))
		require.False(t, ok, a)
		require.Equal(t, Reserved, r, a)
	}
	to, dns, _, ok := p.target(ap("198.18.0.3:53"))
	require.True(t, ok)
	require.True(t, dns)
	require.Equal(t, up, to)
	_, _, r, ok = p.target(ap("198.18.0.3:80"))
	require.False(t, ok, "only port 53 at the DNS address")
	require.Equal(t, NoDNS, r)
	to, _, _, ok = p.target(ap("203.0.113.9:443"))
	require.True(t, ok)
	require.Equal(t, ap("203.0.113.9:443"), to)

	// Replies: the resolver shows as the DNS address, loopback only with
	// AllowHostLoopback, denied sources never.
	src, ok := p.source(up, true, false)
	require.True(t, ok)
	require.Equal(t, ap("198.18.0.3:53"), src)
	_, ok = p.source(ap("127.0.0.1:9"), false, false)
	require.False(t, ok)
	_, ok = p.source(ap("192.0.2.5:9"), false, false)
	require.False(t, ok)

	p.cfg.AllowHostLoopback = true
	to, _, _, ok = p.target(ap("[fd00:198:18::1]:80"))
	require.True(t, ok)
	require.Equal(t, ap("[::1]:80"), to)
	src, ok = p.source(ap("[::ffff:127.0.0.1]:9"), false, false)
	require.True(t, ok)
	require.Equal(t, ap("198.18.0.1:9"), src)

	// With Allow, only what it covers (reserved ranges included).
	p.cfg.Allow = []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}
	_, _, _, ok = p.target(ap("169.254.169.254:80"))
	require.True(t, ok)
	_, _, r, ok = p.target(ap("203.0.113.9:443"))
	require.False(t, ok)
	require.Equal(t, Denied, r)
}

func TestEncodeUDP(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"198.18.0.1:53", "198.18.0.100:40000"},
		{"[fd00:198:18::3]:53", "[fd00:198:18::100]:40000"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		payload := []byte("an answer of odd length")
		hlen := header.IPv4MinimumSize + header.UDPMinimumSize
		if src.Addr().Is6() {
			hlen = header.IPv6MinimumSize + header.UDPMinimumSize
		}
		b := make([]byte, hlen+len(payload))
		copy(b[hlen:], payload)
		encodeUDP(b, src, dst, len(payload))
		var u header.UDP
		var s, d tcpip.Address
		if src.Addr().Is4() {
			ip := header.IPv4(b)
			require.True(t, ip.IsValid(len(b)))
			require.True(t, ip.IsChecksumValid())
			u, s, d = header.UDP(ip.Payload()), ip.SourceAddress(), ip.DestinationAddress()
		} else {
			ip := header.IPv6(b)
			require.True(t, ip.IsValid(len(b)))
			u, s, d = header.UDP(ip.Payload()), ip.SourceAddress(), ip.DestinationAddress()
		}
		require.Equal(t, src.Port(), u.SourcePort())
		require.Equal(t, dst.Port(), u.DestinationPort())
		require.True(t, u.IsChecksumValid(s, d, checksum.Checksum(u.Payload(), 0)), "UDP checksum of %v", tc)
		require.Equal(t, payload, []byte(u.Payload()))
	}
}
