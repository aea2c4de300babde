package forward

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestPolicy(t *testing.T) {
	ap := netip.MustParseAddrPort
	gw4, gw6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:198:18::1")
	dns4 := netip.MustParseAddr("198.18.0.3")
	up := ap("192.0.2.200:53")
	p := Policy{
		Deny:         []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25")},
		HostLoopback: []netip.Addr{gw4, gw6},
		DNS:          []DNSRelay{{Addr: dns4, Upstream: up}},
	}

	_, _, r, ok := p.target(ap("198.18.0.1:80"))
	require.False(t, ok)
	require.Equal(t, HostLoopback, r)
	_, _, r, ok = p.target(ap("192.0.2.1:80"))
	require.False(t, ok)
	require.Equal(t, Denied, r)
	for _, a := range []string{"169.254.169.254:80", "224.0.0.1:5353", "255.255.255.255:67", "0.0.0.0:1", "127.0.0.1:80", "[fe80::1]:80", "[ff02::1]:1"} {
		_, _, r, ok = p.target(ap(a))
		require.False(t, ok, a)
		require.Equal(t, Reserved, r, a)
	}
	to, dns, _, ok := p.target(ap("198.18.0.3:53"))
	require.True(t, ok)
	require.Equal(t, dns4, dns)
	require.Equal(t, up, to)
	_, _, r, ok = p.target(ap("198.18.0.3:80"))
	require.False(t, ok, "only port 53 at the DNS address")
	require.Equal(t, NoDNS, r)
	to, _, _, ok = p.target(ap("203.0.113.9:443"))
	require.True(t, ok)
	require.Equal(t, ap("203.0.113.9:443"), to)

	// Replies: the resolver shows as the DNS address (only to a flow that
	// queried it), loopback only with AllowHostLoopback, denied sources
	// never.
	src, _, ok := p.source(up, dns4, false)
	require.True(t, ok)
	require.Equal(t, ap("198.18.0.3:53"), src)
	src, _, ok = p.source(up, netip.Addr{}, false)
	require.True(t, ok)
	require.Equal(t, up, src, "to a flow that did not query it, the resolver is itself")
	_, r, ok = p.source(ap("192.0.2.5:9"), netip.Addr{}, false)
	require.False(t, ok)
	require.Equal(t, Denied, r)
	_, r, ok = p.source(ap("127.0.0.1:9"), netip.Addr{}, false)
	require.False(t, ok)
	require.Equal(t, HostLoopback, r)

	p.AllowHostLoopback = true
	to, _, _, ok = p.target(ap("[fd00:198:18::1]:80"))
	require.True(t, ok)
	require.Equal(t, ap("[::1]:80"), to)
	src, _, ok = p.source(ap("[::ffff:127.0.0.1]:9"), netip.Addr{}, false)
	require.True(t, ok)
	require.Equal(t, ap("198.18.0.1:9"), src)
	src, _, ok = p.source(ap("[::1]:9"), netip.Addr{}, true)
	require.True(t, ok)
	require.Equal(t, ap("[fd00:198:18::1]:9"), src)

	// With Allow, only what it covers (reserved ranges included).
	p.Allow = []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}
	_, _, _, ok = p.target(ap("169.254.169.254:80"))
	require.True(t, ok)
	_, _, r, ok = p.target(ap("203.0.113.9:443"))
	require.False(t, ok)
	require.Equal(t, Denied, r)

	// The zero Policy refuses only the reserved ranges.
	var zero Policy
	_, _, _, ok = zero.target(ap("203.0.113.9:443"))
	require.True(t, ok)
	_, _, r, ok = zero.target(ap("127.0.0.1:22"))
	require.False(t, ok)
	require.Equal(t, Reserved, r)
}

func TestEncodeUDP(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"198.18.0.1:53", "198.18.0.100:40000"},
		{"[fd00:198:18::3]:53", "[fd00:198:18::100]:40000"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		payload := []byte("an answer of odd length")
		hlen := udpHeaderLen(src)
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

// TestPolicyDenyWins checks that a Deny prefix refuses whatever else
// allows a destination: an Allow prefix around it, and AllowHostLoopback,
// whose addresses are checked both as asked for and as the loopback
// address they stand for.
func TestPolicyDenyWins(t *testing.T) {
	pfx := netip.MustParsePrefix
	ap := netip.MustParseAddrPort
	gw4, gw6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:198:18::1")
	hostLoop := func(p Policy) Policy {
		p.HostLoopback, p.AllowHostLoopback = []netip.Addr{gw4, gw6}, true
		return p
	}
	for _, tc := range []struct {
		name   string
		p      Policy
		dst    string
		to     string // where the flow goes, if allowed
		reason Reason // why not, if to is ""
	}{
		{"deny inside allow", Policy{Allow: []netip.Prefix{pfx("203.0.113.0/24")}, Deny: []netip.Prefix{pfx("203.0.113.128/25")}}, "203.0.113.200:80", "", Denied},
		{"allow around deny", Policy{Allow: []netip.Prefix{pfx("203.0.113.0/24")}, Deny: []netip.Prefix{pfx("203.0.113.128/25")}}, "203.0.113.5:80", "203.0.113.5:80", 0},
		{"host loopback", hostLoop(Policy{}), "198.18.0.1:80", "127.0.0.1:80", 0},
		{"deny the loopback it maps to", hostLoop(Policy{Deny: []netip.Prefix{pfx("127.0.0.0/8")}}), "198.18.0.1:80", "", Denied},
		{"deny the gateway asked", hostLoop(Policy{Deny: []netip.Prefix{pfx("198.18.0.1/32")}}), "198.18.0.1:80", "", Denied},
		{"deny ::1", hostLoop(Policy{Deny: []netip.Prefix{pfx("::1/128")}}), "[fd00:198:18::1]:80", "", Denied},
		{"deny over allowed loopback", hostLoop(Policy{Allow: []netip.Prefix{pfx("127.0.0.0/8")}, Deny: []netip.Prefix{pfx("198.18.0.0/24")}}), "198.18.0.1:80", "", Denied},
		{"allow the loopback it maps to", hostLoop(Policy{Allow: []netip.Prefix{pfx("127.0.0.0/8")}}), "198.18.0.1:80", "127.0.0.1:80", 0},
		{"allow the gateway asked", hostLoop(Policy{Allow: []netip.Prefix{pfx("198.18.0.1/32")}}), "198.18.0.1:80", "127.0.0.1:80", 0},
		{"allow covers neither", hostLoop(Policy{Allow: []netip.Prefix{pfx("203.0.113.0/24")}}), "198.18.0.1:80", "", Denied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to, _, r, ok := tc.p.target(ap(tc.dst))
			if tc.to == "" {
				require.False(t, ok, "%s reached %v", tc.dst, to)
				require.Equal(t, tc.reason, r)
				return
			}
			require.True(t, ok, "%s refused (%v)", tc.dst, r)
			require.Equal(t, ap(tc.to), to)
		})
	}
	// Replies from a denied loopback address do not reach the peer
	// either.
	p := hostLoop(Policy{Deny: []netip.Prefix{pfx("127.0.0.0/8")}})
	_, r, ok := p.source(ap("127.0.0.1:53"), netip.Addr{}, false)
	require.False(t, ok)
	require.Equal(t, Denied, r)
}
