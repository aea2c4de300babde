package sandbox

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestParsePortForward(t *testing.T) {
	ok := []struct {
		in   string
		want PortForward
	}{
		{"8080:80", PortForward{Host: netip.MustParseAddrPort("127.0.0.1:8080"), Port: 80}},
		{"0.0.0.0:5353:53/udp", PortForward{UDP: true, Host: netip.MustParseAddrPort("0.0.0.0:5353"), Port: 53}},
		{"[::1]:2222:22/tcp", PortForward{Host: netip.MustParseAddrPort("[::1]:2222"), Port: 22}},
		{"::1:2222:22", PortForward{Host: netip.MustParseAddrPort("[::1]:2222"), Port: 22}},
	}
	for _, tc := range ok {
		f, err := ParsePortForward(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, f, tc.in)
		back, err := ParsePortForward(f.String())
		require.NoError(t, err)
		require.Equal(t, f, back, "String round trip of %q", tc.in)
	}
	for _, in := range []string{"", "80", "0:80", "8080:0", "8080:80/sctp", "x:8080:80", "8080:70000", "1.2.3.4:x:80"} {
		_, err := ParsePortForward(in)
		require.Error(t, err, in)
	}
}

func TestNormalize(t *testing.T) {
	c, err := Config{}.normalize()
	require.NoError(t, err)
	require.Equal(t, DefaultAddr4, c.Addr4)
	require.Equal(t, DefaultGateway6, c.Gateway6)
	require.Equal(t, uint32(DefaultMTU), c.MTU)
	require.Zero(t, c.MaxHalfOpen, "the limits are forward's, which fills them in")
	require.Equal(t, DefaultTCPBuffer, c.TCPBuffer)
	_, err = Config{Options: forward.Options{NICs: []tcpip.NICID{1}}}.normalize()
	require.ErrorContains(t, err, "NICs")

	for name, bad := range map[string]Config{
		"gateway outside":    {Gateway4: netip.MustParseAddr("10.0.0.1")},
		"gateway is sandbox": {Gateway4: DefaultAddr4.Addr()},
		"dns is gateway":     {DNS4: DefaultGateway4},
		"v6 gateway v4":      {Gateway6: DefaultGateway4},
		"mtu":                {MTU: 100},
		"tcp buffer":         {Options: forward.Options{TCPBuffer: 10}},
		"v6 forward no v6":   {NoIPv6: true, PortForwards: []PortForward{{Host: netip.MustParseAddrPort("[::1]:1"), Port: 1}}},
	} {
		_, err := bad.normalize()
		require.Error(t, err, name)
	}
}

func TestPolicyFromConfig(t *testing.T) {
	c, err := Config{AllowHostLoopback: true, Deny: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25")}}.normalize()
	require.NoError(t, err)
	up := [2]netip.AddrPort{netip.MustParseAddrPort("192.0.2.200:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	p := policy(&c, up)
	require.Equal(t, c.Deny, p.Deny)
	require.True(t, p.AllowHostLoopback)
	require.Equal(t, []netip.Addr{DefaultGateway4, DefaultGateway6}, p.HostLoopback)
	require.Equal(t, []forward.DNSRelay{{Addr: DefaultDNS4, Upstream: up[0]}, {Addr: DefaultDNS6, Upstream: up[1]}}, p.DNS)
	// With the DNS relay off the DNS addresses stay ours and refuse
	// (NoDNS) rather than being dialed on the host.
	p = policy(&c, [2]netip.AddrPort{})
	require.Len(t, p.DNS, 2)
	require.False(t, p.DNS[0].Upstream.IsValid())
}

func TestCheck(t *testing.T) {
	fwd := PortForward{Host: netip.MustParseAddrPort("127.0.0.1:8080"), Port: 80}
	for _, tc := range []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"qdisc", Config{Qdisc: "nope"}, `unknown qdisc "nope": valid names are`},
		{"queues", Config{Queues: 1000}, "1000 TUN queues: must be from 1 to 256"},
		{"negative queues", Config{Queues: -1}, "-1 TUN queues"},
		{"device long", Config{Device: "a-name-far-too-long"}, `device name "a-name-far-too-long": want 1 to 15 characters`},
		{"device slash", Config{Device: "tun/0"}, `device name "tun/0"`},
		{"prefix /32", Config{Addr4: netip.MustParsePrefix("198.18.0.100/32")}, "address 198.18.0.100/32: want a host address in a prefix of /30 or shorter"},
		{"network address", Config{Addr4: netip.MustParsePrefix("198.18.0.0/24")}, "address 198.18.0.0/24: want a host address"},
		{"broadcast address", Config{Addr4: netip.MustParsePrefix("198.18.0.255/24")}, "address 198.18.0.255/24: want a host address"},
		{"v6 prefix", Config{Addr6: netip.MustParsePrefix("fd00:198:18::100/128")}, "IPv6 address fd00:198:18::100/128: want a host address in a prefix of /126 or shorter"},
		{"bad allow", Config{Allow: []netip.Prefix{{}}}, "allow/deny prefix invalid Prefix: not a valid CIDR prefix"},
		{"duplicate forward", Config{PortForwards: []PortForward{fwd, {Host: fwd.Host, Port: 81}}}, "port forward 127.0.0.1:8080:81: host address 127.0.0.1:8080/tcp is forwarded twice"},
		{"forward without port", Config{PortForwards: []PortForward{{Host: fwd.Host}}}, "needs a host address and a sandbox port"},
		{"mtu", Config{MTU: 100}, "MTU 100: must be from"},
		{"gateway outside", Config{Gateway4: netip.MustParseAddr("10.0.0.1")}, "gateway 10.0.0.1: must be an IPv4 address in 198.18.0.0/24"},
		{"proxy scheme", Config{Proxy: "socks4://127.0.0.1:1080"}, `scheme "socks4" not supported`},
		{"proxy port", Config{Proxy: "socks5://127.0.0.1"}, "want HOST:PORT"},
		{"proxy forms", Config{Proxy: "ftp://h:1"}, ProxyForms},
		{"dns is sandbox", Config{DNS4: DefaultAddr4.Addr()}, "DNS address 198.18.0.100: want an IPv4 host address other than the sandbox's, or 0.0.0.0 for none"},
		{"dns v6 in v4", Config{DNS4: DefaultDNS6}, "DNS address fd00:198:18::3: want an IPv4 host address"},
		{"dns loopback", Config{DNS6: netip.MustParseAddr("::1")}, "IPv6 DNS address ::1: want an IPv6 host address other than the sandbox's, or :: for none"},
		{"dns is gateway", Config{DNS4: DefaultGateway4}, "the gateway and the DNS address are both 198.18.0.1: they must differ"},
		{"alias is dns", Config{MapGuestAddr4: DefaultDNS4}, "the DNS address and the guest address alias are both 198.18.0.3"},
		{"alias unspecified", Config{MapGuestAddr4: netip.IPv4Unspecified()}, "guest address alias 0.0.0.0: want an IPv4 host address other than the sandbox's\n"},
		{"loopback alias multicast", Config{HostLoopback6: netip.MustParseAddr("ff02::1")}, "IPv6 host loopback address ff02::1"},
		{"v6 gateway global outside", Config{Gateway6: netip.MustParseAddr("2001:db8::1")}, "IPv6 gateway 2001:db8::1: must be an IPv6 address in fd00:198:18::/64, or a link-local one"},
		{"outbound family", Config{OutboundAddr4: netip.MustParseAddr("::1")}, "outbound address ::1: want an IPv4 address of the host"},
		{"outbound6 family", Config{OutboundAddr6: netip.MustParseAddr("127.0.0.1")}, "IPv6 outbound address 127.0.0.1"},
		{"outbound with proxy", Config{Proxy: "socks5://127.0.0.1:1080", OutboundAddr4: netip.MustParseAddr("127.0.0.1")}, "leave OutboundAddr4 and OutboundAddr6 unset, or the proxy"},
	} {
		err := tc.cfg.Check()
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error()+"\n", tc.msg, tc.name)
	}
	// A bad proxy URL's message never carries its password.
	err := Config{Proxy: "socks5://bob:s3cret@h:x"}.Check()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	for _, ok := range []string{"socks5://127.0.0.1:1080", "socks5://bob:pw@127.0.0.1:1080", "http://127.0.0.1:3128"} {
		require.NoError(t, Config{Proxy: ok}.Check(), ok)
	}
	// The same port over UDP and TCP is two forwards, and port 0 may
	// repeat (each picks a port).
	require.NoError(t, Config{PortForwards: []PortForward{fwd, {UDP: true, Host: fwd.Host, Port: 80}}}.Check())
	any0 := PortForward{Host: netip.MustParseAddrPort("127.0.0.1:0"), Port: 80}
	require.NoError(t, Config{PortForwards: []PortForward{any0, any0}, Qdisc: "llist", Queues: 4, Device: "sb0"}.Check())
}

// TestDialer checks which UDP the relay gets for each proxy setting:
// host sockets without a proxy, none through one (forward refuses it),
// host sockets again with ProxyUDPDirect.
func TestDialer(t *testing.T) {
	d, err := dialer(&Config{})
	require.NoError(t, err)
	require.IsType(t, &net.Dialer{}, d)
	d, err = dialer(&Config{Proxy: "socks5://127.0.0.1:1080"})
	require.NoError(t, err)
	_, carries := d.(forward.PacketListener)
	require.False(t, carries, "through a proxy, UDP is refused by default")
	d, err = dialer(&Config{Proxy: "http://127.0.0.1:3128", ProxyUDPDirect: true})
	require.NoError(t, err)
	_, carries = d.(forward.PacketListener)
	require.True(t, carries, "ProxyUDPDirect carries UDP on host sockets")

	// A Dialer is the relay's, as given, and what binds host sockets is
	// refused with it.
	own := &net.Dialer{Timeout: 42 * time.Second}
	d, err = dialer(&Config{Dialer: own})
	require.NoError(t, err)
	require.Same(t, own, d)
	for _, bad := range []Config{
		{Dialer: own, Proxy: "socks5://127.0.0.1:1080"},
		{Dialer: own, Interface: "lo"},
		{Dialer: own, Mark: 7},
		{Dialer: own, OutboundAddr4: netip.MustParseAddr("192.0.2.1")},
		{Dialer: own, AllowHostLoopback: true},
	} {
		require.ErrorContains(t, bad.Check(), "Dialer", "%+v", bad)
	}
	require.NoError(t, Config{Dialer: own}.Check())
}

// TestAddresses: what a sandbox owns and what its relay maps, for
// slirp4netns's layout, pasta's (the host's addressing copied, DNS at a
// link-local address outside the prefix, the gateway the host's real
// one), and the loopback mapped to an address of its own.
func TestAddresses(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	up := [2]netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	for _, tc := range []struct {
		name         string
		cfg          Config
		owned        []netip.Prefix
		loopback     []netip.Addr
		dns          []forward.DNSRelay
		guestAliases int
	}{
		{
			name:     "slirp4netns",
			cfg:      Config{Addr4: p("10.0.2.100/24"), Gateway4: a("10.0.2.2"), DNS4: a("10.0.2.3"), NoIPv6: true},
			owned:    []netip.Prefix{p("10.0.2.2/24"), p("10.0.2.3/24")},
			loopback: []netip.Addr{a("10.0.2.2")},
			dns:      []forward.DNSRelay{{Addr: a("10.0.2.3"), Upstream: up[0]}},
		},
		{
			name: "pasta, Podman's",
			cfg: Config{
				Addr4: p("192.0.2.50/24"), Gateway4: a("192.0.2.1"), DNS4: a("169.254.1.1"), HostLoopback4: netip.IPv4Unspecified(), MapGuestAddr4: a("169.254.1.2"),
				Addr6: p("2001:db8::50/64"), Gateway6: a("fe80::1"), DNS6: netip.IPv6Unspecified(), HostLoopback6: netip.IPv6Unspecified(),
			},
			owned:        []netip.Prefix{p("192.0.2.1/24"), p("fe80::1/128"), p("169.254.1.1/32"), p("169.254.1.2/32")},
			dns:          []forward.DNSRelay{{Addr: a("169.254.1.1"), Upstream: up[0]}},
			guestAliases: 1,
		},
		{
			name:     "pasta --map-host-loopback",
			cfg:      Config{Addr4: p("192.0.2.50/24"), Gateway4: a("192.0.2.1"), DNS4: netip.IPv4Unspecified(), HostLoopback4: a("192.0.2.9"), NoIPv6: true},
			owned:    []netip.Prefix{p("192.0.2.1/24"), p("192.0.2.9/24")},
			loopback: []netip.Addr{a("192.0.2.9")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.cfg.normalize()
			require.NoError(t, err)
			require.Equal(t, tc.owned, c.owned())
			pol := policy(&c, up)
			require.Equal(t, tc.loopback, pol.HostLoopback)
			require.Equal(t, tc.dns, pol.DNS)
			h := withGuestAliases(forward.Relay(&net.Dialer{}, pol), &net.Dialer{}, &c)
			g, aliased := h.(*guestAliases)
			require.Equal(t, tc.guestAliases > 0, aliased)
			if aliased {
				require.Len(t, g.to, tc.guestAliases)
				require.Equal(t, c.Addr4.Addr(), g.to[c.MapGuestAddr4])
			}
		})
	}
}
