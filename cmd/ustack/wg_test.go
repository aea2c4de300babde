package main

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/proxy"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// wgKey returns a fresh X25519 key pair in base64, as wg genkey and wg
// pubkey print them.
func wgKey(tb testing.TB) (private, public string) {
	tb.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(tb, err)
	return base64.StdEncoding.EncodeToString(k.Bytes()), base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
}

// writeConf writes a configuration file into dir and returns its path.
func writeConf(tb testing.TB, dir, name, text string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	require.NoError(tb, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// TestParseWG checks ustack wg's command line and configuration file:
// what each accepted one serves, and the error each bad one gets, with
// no key in any message.
func TestParseWG(t *testing.T) {
	priv, _ := wgKey(t)
	_, peerPub := wgKey(t)
	dir := t.TempDir()
	exit := writeConf(t, dir, "exit.conf", fmt.Sprintf(`[Interface]
PrivateKey = %s
ListenPort = 0
Address = 198.19.100.1/24, fd00:19::1/64
DNS = 198.19.100.53

[Peer]
PublicKey = %s
AllowedIPs = 198.19.100.2/32, fd00:19::2/128
`, priv, peerPub))
	named := writeConf(t, dir, "named.conf", fmt.Sprintf(`[Interface]
PrivateKey = %s
Address = 198.19.100.1/24
DNS = 198.19.100.1

[Peer]
PublicKey = %s
AllowedIPs = 0.0.0.0/0
Endpoint = localhost:51820
`, priv, peerPub))
	hook := writeConf(t, dir, "hook.conf", "[Interface]\nPrivateKey = "+priv+"\nPostUp = iptables -A FORWARD\n")
	noAddr := writeConf(t, dir, "noaddr.conf", "[Interface]\nPrivateKey = "+priv+"\n[Peer]\nPublicKey = "+peerPub+"\n")
	badMTU := writeConf(t, dir, "mtu.conf", "[Interface]\nPrivateKey = "+priv+"\nAddress = 198.19.0.1/24\nMTU = 1000\n[Peer]\nPublicKey = "+peerPub+"\n")
	auth := writeConf(t, dir, "auth", "user:secret-pass\n")
	open := writeConf(t, dir, "open.conf", "[Interface]\nPrivateKey = "+priv+"\nAddress = 198.19.0.1/24\n[Peer]\nPublicKey = "+peerPub+"\n")
	require.NoError(t, os.Chmod(open, 0o644))
	badAuth := writeConf(t, dir, "badauth", "no colon\n")

	for _, tc := range []struct {
		name string
		args []string
		want string // the error's substring; "" for accepted
		spec func(t *testing.T, s wgSpec)
	}{
		{"exit node", []string{"-config", exit, "-allow-host-loopback", "-dns-upstream", "127.0.0.1:5353", "-p", "8080:198.19.100.2:80", "-p", "[::1]:0:[fd00:19::2]:53/udp"}, "", func(t *testing.T, s wgSpec) {
			require.True(t, s.Relay)
			require.True(t, s.AllowHostLoopback)
			up := netip.MustParseAddrPort("127.0.0.1:5353")
			require.Equal(t, [2]netip.AddrPort{up, up}, s.DNSUpstream)
			require.Equal(t, []sandbox.HostForward{
				{Host: netip.MustParseAddrPort("127.0.0.1:8080"), To: "198.19.100.2:80"},
				{UDP: true, Host: netip.MustParseAddrPort("[::1]:0"), To: "[fd00:19::2]:53"},
			}, s.Forwards)
		}},
		{"client", []string{"-config", exit, "-relay=false", "-socks", "127.0.0.1:1080", "-http", "[::1]:8080", "-proxy-auth", auth, "-L", "0.0.0.0:2222:host.test:22", "-L", "5353:198.19.100.2:53/udp"}, "", func(t *testing.T, s wgSpec) {
			require.False(t, s.Relay)
			require.Equal(t, "user:secret-pass", s.Auth)
			require.Equal(t, [2]netip.AddrPort{}, s.DNSUpstream, "a client's DNS is the tunnel's")
			require.Equal(t, []sandbox.HostForward{
				{Host: netip.MustParseAddrPort("0.0.0.0:2222"), To: "host.test:22"},
				{UDP: true, Host: netip.MustParseAddrPort("127.0.0.1:5353"), To: "198.19.100.2:53"},
			}, s.Locals)
		}},
		{"endpoint name resolved", []string{"-config", named, "-relay=false"}, "", func(t *testing.T, s wgSpec) {
			c, err := wgconf.Parse(s.Config)
			require.NoError(t, err)
			ap, ok := c.Peers[0].Endpoint.AddrPort()
			require.True(t, ok, "the relay gets an address: %v", c.Peers[0].Endpoint)
			require.True(t, ap.Addr().IsLoopback())
		}},
		{"world-readable", []string{"-config", open}, "", func(t *testing.T, s wgSpec) {}},
		{"no config", nil, "-config FILE is required", nil},
		{"missing file", []string{"-config", filepath.Join(dir, "nope")}, "no such file", nil},
		{"argument", []string{"-config", exit, "extra"}, `unexpected argument "extra"`, nil},
		{"shell hook", []string{"-config", hook}, "line 3: PostUp: refused", nil},
		{"no address", []string{"-config", noAddr}, "[Interface] has no Address", nil},
		{"mtu", []string{"-config", badMTU}, "MTU 1000: ustack's tunnels take 1280", nil},
		{"allow", []string{"-config", exit, "-allow", "nope"}, `-allow "nope": want a CIDR`, nil},
		{"deny", []string{"-config", exit, "-deny", "1.2.3.4"}, `-deny "1.2.3.4"`, nil},
		{"limits", []string{"-config", exit, "-max-tcp", "-2"}, "-max-tcp -2", nil},
		{"timeouts", []string{"-config", exit, "-udp-timeout", "0s"}, "must be positive", nil},
		{"procs", []string{"-config", exit, "-procs", "-1"}, "-procs -1", nil},
		{"p without relay", []string{"-config", exit, "-relay=false", "-p", "8080:198.19.100.2:80"}, "use -L", nil},
		{"p not a peer", []string{"-config", exit, "-p", "8080:198.19.100.9:80"}, "no peer's AllowedIPs covers 198.19.100.9", nil},
		{"p own address", []string{"-config", exit, "-p", "8080:198.19.100.1:80"}, "this endpoint's own address", nil},
		{"p name", []string{"-config", exit, "-p", "8080:host.test:80"}, `peer address "host.test": not an IP address`, nil},
		{"p form", []string{"-config", exit, "-p", "8080:80"}, "want [HOSTIP:]HOSTPORT:PEERADDR:PORT[/udp]", nil},
		{"p proto", []string{"-config", exit, "-p", "8080:198.19.100.2:80/sctp"}, `protocol "sctp"`, nil},
		{"L form", []string{"-config", exit, "-L", "[::1:80:h:1"}, "want [HOST:]PORT:DEST:PORT[/udp]", nil},
		{"L port", []string{"-config", exit, "-L", "80:h:0"}, `port "0"`, nil},
		{"L host port", []string{"-config", exit, "-L", "x:h:1"}, `host port "x"`, nil},
		{"L dest", []string{"-config", exit, "-L", "1:-bad-:1"}, `destination "-bad-"`, nil},
		{"socks", []string{"-config", exit, "-socks", "1080"}, `-socks "1080": want a host address and port`, nil},
		{"auth without proxy", []string{"-config", exit, "-proxy-auth", auth}, "neither is given", nil},
		{"auth file", []string{"-config", exit, "-socks", "127.0.0.1:1080", "-proxy-auth", badAuth}, "want USER:PASSWORD", nil},
		{"loopback without relay", []string{"-config", exit, "-relay=false", "-allow-host-loopback"}, "-relay=false turns off", nil},
		{"loopback and DNS", []string{"-config", named, "-allow-host-loopback"}, "DNS 198.19.100.1 is also an address of this endpoint's", nil},
		{"dns upstream", []string{"-config", exit, "-dns-upstream", "x:y"}, `-dns-upstream "x:y"`, nil},
		{"allow without relay", []string{"-config", exit, "-relay=false", "-allow", "198.18.0.0/15"}, "-allow: it applies to the relay", nil},
		{"limit without relay", []string{"-config", exit, "-relay=false", "-max-tcp", "5"}, "-max-tcp: it applies to the relay", nil},
		{"port twice", []string{"-config", exit, "-relay=false", "-L", "2000:h.test:1", "-socks", "127.0.0.1:2000"}, "-socks: 127.0.0.1:2000 is taken by -L 127.0.0.1:2000->h.test:1 already", nil},
		{"udp and tcp", []string{"-config", exit, "-relay=false", "-L", "2000:h.test:1", "-L", "2000:h.test:1/udp"}, "", func(t *testing.T, s wgSpec) { require.Len(t, s.Locals, 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			r, status, ok := parseWG(tc.args, &stderr)
			require.NotContains(t, stderr.String(), priv, "the private key printed")
			if tc.want == "" {
				require.True(t, ok, "%s", stderr.String())
				require.Equal(t, "ustack wg", r.spec.Name)
				tc.spec(t, r.spec)
				if tc.name == "world-readable" {
					require.Len(t, r.warnings, 1)
					require.Contains(t, r.warnings[0], "chmod 600")
				} else {
					require.Empty(t, r.warnings)
				}
				return
			}
			require.False(t, ok)
			require.Equal(t, 2, status)
			require.Contains(t, stderr.String(), tc.want)
			require.True(t, strings.HasPrefix(stderr.String(), "ustack wg: "), "%s", stderr.String())
		})
	}
	// -h lists every flag and is not an error.
	var stderr bytes.Buffer
	_, status, ok := parseWG([]string{"-h"}, &stderr)
	require.False(t, ok)
	require.Zero(t, status)
	for _, f := range []string{"-config", "-relay", "-allow", "-deny", "-allow-host-loopback", "-dns-upstream", "-p", "-L", "-socks", "-http", "-proxy-auth", "-api-socket", "-metrics", "-stats", "-seccomp", "-max-half-open", "-procs"} {
		out := stderr.String()
		require.True(t, strings.Contains(out, "\n  "+f+" ") || strings.Contains(out, "\n  "+f+"\n"), "ustack wg -h lists %s", f)
	}
}

// TestSplitColons checks the forwards' address splitting.
func TestSplitColons(t *testing.T) {
	for in, want := range map[string][]string{
		"80:h:81":               {"80", "h", "81"},
		"[::1]:80:[fd00::2]:81": {"::1", "80", "fd00::2", "81"},
		"a::b":                  {"a", "", "b"},
		"x:":                    {"x", ""},
		"[::1]:":                {"::1", ""},
		"[::1]x:1":              nil,
		"[::1":                  nil,
		"a]:1":                  nil,
	} {
		got, ok := splitColons(in)
		if want == nil {
			require.False(t, ok, "%q: %q", in, got)
			continue
		}
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
}

// TestWGPolicy checks the exit node's policy: its own addresses stand
// for the host's loopback but for a DNS address, the DNS addresses relay
// by IP version, and the tunnel's ranges are denied but for its own and
// DNS addresses (peers do not reach each other through the host).
func TestWGPolicy(t *testing.T) {
	c := &wgconf.Config{
		Interface: wgconf.Interface{
			Addresses: []netip.Prefix{netip.MustParsePrefix("198.19.100.1/24"), netip.MustParsePrefix("fd00:19::1/126")},
			DNS:       []netip.Addr{netip.MustParseAddr("198.19.100.53"), netip.MustParseAddr("fd00:19::1")},
		},
		Peers: []wgconf.Peer{
			{AllowedIPs: []netip.Prefix{netip.MustParsePrefix("198.19.100.2/32"), netip.MustParsePrefix("198.19.200.0/30")}},
			{AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
		},
	}
	up4, up6 := netip.MustParseAddrPort("127.0.0.1:53"), netip.MustParseAddrPort("[::1]:53")
	s := &wgSpec{AllowHostLoopback: true, DNSUpstream: [2]netip.AddrPort{up4, up6}, Deny: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	p := newWGTunnel(c).policy(s)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("198.19.100.1")}, p.HostLoopback, "fd00:19::1 is a DNS address")
	require.True(t, p.AllowHostLoopback)
	require.Equal(t, []forward.DNSRelay{{Addr: netip.MustParseAddr("198.19.100.53"), Upstream: up4}, {Addr: netip.MustParseAddr("fd00:19::1"), Upstream: up6}}, p.DNS)
	denied := func(a string) bool {
		for _, d := range p.Deny {
			if d.Contains(netip.MustParseAddr(a)) {
				return true
			}
		}
		return false
	}
	for a, want := range map[string]bool{
		"203.0.113.9":  true, // the user's
		"198.19.100.2": true, "198.19.100.99": true, "198.19.100.0": true, "198.19.100.255": true,
		"198.19.200.3": true, "fd00:19::2": true, "fd00:19::3": true,
		"198.19.100.1": false, "198.19.100.53": false, "fd00:19::1": false, // own, DNS
		"198.18.0.1": false, "198.19.101.1": false, // outside the tunnel: 0.0.0.0/0 is the world
	} {
		require.Equal(t, want, denied(a), a)
	}
	// Subtracting an address leaves one prefix per bit below the
	// prefix's, covering the rest exactly.
	got := subtractAddr(netip.MustParsePrefix("198.19.100.0/24"), netip.MustParseAddr("198.19.100.1"))
	require.Len(t, got, 8)
	n := 0
	for _, p := range got {
		n += 1 << (32 - p.Bits())
	}
	require.Equal(t, 255, n)
}

// proxyTunnel is a tunnel for the proxies' tests: two wgnet Nets joined
// by wireguard-go over in-memory binds; the server side runs the
// services, the client side is the proxies' tunnel.
type proxyTunnel struct {
	client, server *wgnet.Net
	serverAddr     netip.Addr
	devs           [2]*device.Device
	stop           func()
}

func newProxyTunnel(t *testing.T) *proxyTunnel {
	t.Helper()
	addrs := [2]netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")}
	var nets [2]*wgnet.Net
	var devs [2]*device.Device
	var priv, pub [2]string
	for i := range priv {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		require.NoError(t, err)
		priv[i], pub[i] = hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes())
	}
	for i := range nets {
		tdev, n, err := wgnet.CreateNetTUN([]netip.Addr{addrs[i]}, nil, 1420)
		require.NoError(t, err)
		nets[i] = n
		devs[i] = device.NewDevice(tdev, conn.NewStdNetBind(), &device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf})
		require.NoError(t, devs[i].IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=0\npublic_key=%s\nallowed_ip=%s/32\n", priv[i], pub[1-i], addrs[1-i])))
		require.NoError(t, devs[i].Up())
	}
	// Each peer at the other's port on the loopback.
	for i := range devs {
		port, _ := wgDeviceState(devs[1-i])
		require.NoError(t, devs[i].IpcSet(fmt.Sprintf("public_key=%s\nendpoint=127.0.0.1:%d\n", pub[1-i], port)))
	}
	pt := &proxyTunnel{client: nets[0], server: nets[1], serverAddr: addrs[1], devs: devs}
	var stops []func()
	tl, err := nets[1].ListenTCPAddrPort(netip.AddrPortFrom(netip.Addr{}, 7))
	require.NoError(t, err)
	stops = append(stops, func() { tl.Close() })
	done := make(chan struct{}, 2)
	go func() { xfer.EchoStreams(tl); done <- struct{}{} }()
	ul, err := nets[1].ListenUDPAddrPort(netip.AddrPortFrom(netip.Addr{}, 7))
	require.NoError(t, err)
	stops = append(stops, func() { ul.Close() })
	go func() { xfer.EchoPackets(ul); done <- struct{}{} }()
	pt.stop = func() {
		for _, s := range stops {
			s()
		}
		<-done
		<-done
		devs[0].Close()
		devs[1].Close()
	}
	t.Cleanup(pt.stop)
	return pt
}

// socksUDP exchanges one datagram with dst through a SOCKS5 server's UDP
// ASSOCIATE, with a client written here (x/net/proxy has none).
func socksUDP(t *testing.T, server string, dst socksAddr, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", server)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Write([]byte{socksVersion, 1, socksNoAuth})
	require.NoError(t, err)
	var m [2]byte
	_, err = io.ReadFull(c, m[:])
	require.NoError(t, err)
	require.Equal(t, [2]byte{socksVersion, socksNoAuth}, m)
	_, err = c.Write(socksReply(socksUDPAssociate, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))) // VER CMD RSV and an all-zero address
	require.NoError(t, err)
	code, bound, err := readSOCKSRequest(c) // the reply has the request's shape
	require.NoError(t, err)
	require.Equal(t, byte(socksSucceeded), code)
	u, err := net.Dial("udp", netip.AddrPortFrom(bound.ip, bound.port).String())
	require.NoError(t, err)
	defer u.Close()
	hdr := []byte{0, 0, 0}
	if dst.name != "" {
		hdr = append(hdr, socksDomain, byte(len(dst.name)))
		hdr = append(append(hdr, dst.name...), byte(dst.port>>8), byte(dst.port))
	} else {
		hdr = appendSOCKSAddr(hdr, netip.AddrPortFrom(dst.ip, dst.port))
	}
	require.NoError(t, u.SetDeadline(time.Now().Add(30*time.Second)))
	buf := make([]byte, 2048)
	// Datagrams may be lost while the tunnel's first handshake runs: a
	// few tries.
	for try := 0; ; try++ {
		_, err = u.Write(append(hdr, msg...))
		require.NoError(t, err)
		require.NoError(t, u.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, err := u.Read(buf)
		if err != nil && try < 10 {
			continue
		}
		require.NoError(t, err)
		from, payload, err := parseSOCKSDatagram(buf[:n])
		require.NoError(t, err)
		require.True(t, from.ip.IsValid(), "answers name their source's address")
		return payload
	}
}

// TestSOCKS5 drives the SOCKS5 server over a WireGuard tunnel in this
// process: CONNECT with x/net/proxy's client (no auth, then a user and
// password), UDP ASSOCIATE, a refused destination's reply code and a
// wrong password.
func TestSOCKS5(t *testing.T) {
	pt := newProxyTunnel(t)
	for _, auth := range []string{"", "user:pass"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		s := newSOCKSServer(ln, &tunnelDialer{net: pt.client}, auth, 10*time.Second)
		var pa *proxy.Auth
		if auth != "" {
			pa = &proxy.Auth{User: "user", Password: "pass"}
		}
		c, err := socksDial(ln.Addr().String(), pa, netip.AddrPortFrom(pt.serverAddr, 7).String())
		require.NoError(t, err, "auth %q", auth)
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		require.NoError(t, xfer.RoundTrip(c, c, bytes.Repeat([]byte("socks "), 10000)))
		c.Close()
		if auth == "" {
			got := socksUDP(t, ln.Addr().String(), socksAddr{ip: pt.serverAddr, port: 7}, []byte("over udp"))
			require.Equal(t, "over udp", string(got))
			_, err = socksDial(ln.Addr().String(), nil, netip.AddrPortFrom(pt.serverAddr, 9).String())
			require.ErrorContains(t, err, "connection refused")
			require.Equal(t, uint64(1), s.failed.Load())
			require.Equal(t, uint64(1), s.assocs.Load())
		} else {
			_, err = socksDial(ln.Addr().String(), &proxy.Auth{User: "user", Password: "wrong"}, netip.AddrPortFrom(pt.serverAddr, 7).String())
			require.Error(t, err)
		}
		require.NoError(t, s.Close())
	}
}

// TestHTTPProxy drives the HTTP proxy over a WireGuard tunnel: a CONNECT
// tunnel, a plain http:// request, and the 407 without credentials.
func TestHTTPProxy(t *testing.T) {
	pt := newProxyTunnel(t)
	hl, err := pt.server.ListenTCPAddrPort(netip.AddrPortFrom(netip.Addr{}, 80))
	require.NoError(t, err)
	srv := httpTestServer(hl)
	defer srv.Close()
	for _, auth := range []string{"", "user:pass"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p := newHTTPProxy(ln, &tunnelDialer{net: pt.client}, auth, 10*time.Second)
		proxyURL := "http://" + ln.Addr().String()
		if auth != "" {
			code, _ := httpGetVia(t, proxyURL, "http://"+pt.serverAddr.String()+"/hello")
			require.Equal(t, 407, code)
			proxyURL = "http://" + auth + "@" + ln.Addr().String()
		}
		code, body := httpGetVia(t, proxyURL, "http://"+pt.serverAddr.String()+"/hello")
		require.Equal(t, 200, code)
		require.Equal(t, "hello /hello", body)

		// CONNECT to the echo port, by hand.
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		authz := ""
		if auth != "" {
			authz = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(auth)) + "\r\n"
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n%sEarly", netip.AddrPortFrom(pt.serverAddr, 7), authz+"\r\n")
		line := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
		_, err = io.ReadFull(c, line)
		require.NoError(t, err)
		require.Equal(t, "HTTP/1.1 200 Connection established\r\n\r\n", string(line))
		early := make([]byte, 5)
		_, err = io.ReadFull(c, early)
		require.NoError(t, err)
		require.Equal(t, "Early", string(early), "bytes sent with the request go through")
		require.NoError(t, xfer.RoundTrip(c, c, []byte("through CONNECT")))
		c.Close()
		require.NoError(t, p.Close())
	}
}

// TestWGExitNodeInProcess serves ustack wg's exit node in this process
// (startWG, as -seccomp=false does) on the loopback, with a wireguard-go
// client whose network is wgnet: the client reaches a TCP and a UDP
// service on the host's loopback through the exit node's own address,
// and a -p forward reaches a service of the client's; the counters say
// so, and the private key is in no message.
func TestWGExitNodeInProcess(t *testing.T) {
	privExit, pubExit := wgKey(t)
	privClient, pubClient := wgKey(t)
	exitAddr, clientAddr := netip.MustParseAddr("198.19.9.1"), netip.MustParseAddr("198.19.9.2")
	exitAddr6, clientAddr6 := netip.MustParseAddr("fd00:19:9::1"), netip.MustParseAddr("fd00:19:9::2")
	conf := fmt.Sprintf("[Interface]\nPrivateKey = %s\nAddress = %s/24, %s/64\n\n[Peer]\nPublicKey = %s\nAllowedIPs = %s/32, %s/128\n",
		privExit, exitAddr, exitAddr6, pubClient, clientAddr, clientAddr6)
	dir := t.TempDir()
	path := writeConf(t, dir, "exit.conf", conf)
	api := filepath.Join(dir, "api.sock")
	var stderr bytes.Buffer
	r, _, ok := parseWG([]string{"-config", path, "-allow-host-loopback", "-stats", "-p", "127.0.0.1:0:" + clientAddr.String() + ":7",
		"-metrics", "127.0.0.1:0", "-api-socket", api}, &stderr)
	require.True(t, ok, "%s", stderr.String())

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hl.Close()
	go xfer.EchoStreams(hl)
	hu, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hu.Close()
	go xfer.EchoPackets(hu)

	w, err := startWG(&r.spec, &stderr)
	require.NoError(t, err)
	defer w.close()
	port, _ := wgDeviceState(w.dev)

	// A second endpoint on the same port fails cleanly, closing what it
	// opened.
	busy := writeConf(t, dir, "busy.conf", strings.Replace(conf, "[Interface]\n", fmt.Sprintf("[Interface]\nListenPort = %d\n", port), 1))
	r2, _, ok := parseWG([]string{"-config", busy, "-seccomp=false"}, io.Discard)
	require.True(t, ok)
	_, err = startWG(&r2.spec, io.Discard)
	require.ErrorContains(t, err, fmt.Sprintf("open the WireGuard UDP sockets on port %d", port))

	tdev, cnet, err := wgnet.CreateNetTUN([]netip.Addr{clientAddr, clientAddr6}, nil, 1420)
	require.NoError(t, err)
	cdev := device.NewDevice(tdev, conn.NewStdNetBind(), &device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf})
	defer cdev.Close()
	b64hex := func(s string) string { b, _ := base64.StdEncoding.DecodeString(s); return hex.EncodeToString(b) }
	require.NoError(t, cdev.IpcSet(fmt.Sprintf("private_key=%s\npublic_key=%s\nendpoint=127.0.0.1:%d\nallowed_ip=0.0.0.0/0\nallowed_ip=::/0\n", b64hex(privClient), b64hex(pubExit), port)))
	require.NoError(t, cdev.Up())
	cl, err := cnet.ListenTCPAddrPort(netip.AddrPortFrom(netip.Addr{}, 7))
	require.NoError(t, err)
	defer cl.Close()
	go xfer.EchoStreams(cl)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := cnet.DialContext(ctx, "tcp", netip.AddrPortFrom(exitAddr, uint16(hl.Addr().(*net.TCPAddr).Port)).String())
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, xfer.RoundTrip(c, c, bytes.Repeat([]byte("exit "), 20000)))
	c.Close()
	u, err := cnet.DialContext(ctx, "udp", netip.AddrPortFrom(exitAddr, uint16(hu.LocalAddr().(*net.UDPAddr).Port)).String())
	require.NoError(t, err)
	require.NoError(t, u.SetDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, xfer.RoundTrip(u, u, []byte("a datagram")))
	u.Close()
	// A host client reaches the client's service through -p.
	f, err := net.Dial("tcp", w.pf.Addrs()[0].String())
	require.NoError(t, err)
	require.NoError(t, f.SetDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, xfer.RoundTrip(f, f, []byte("forwarded")))
	f.Close()

	// IPv6: the host's ::1 through the exit node's IPv6 address.
	h6, err := net.Listen("tcp", "[::1]:0")
	require.NoError(t, err)
	defer h6.Close()
	go xfer.EchoStreams(h6)
	c6, err := cnet.DialContext(ctx, "tcp", netip.AddrPortFrom(exitAddr6, uint16(h6.Addr().(*net.TCPAddr).Port)).String())
	require.NoError(t, err)
	require.NoError(t, c6.SetDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, xfer.RoundTrip(c6, c6, []byte("over ipv6")))
	c6.Close()

	// The API adds a forward to the client's service, lists and removes it.
	apiCall := func(req string) string {
		a, err := net.Dial("unix", api)
		require.NoError(t, err)
		defer a.Close()
		_, err = io.WriteString(a, req)
		require.NoError(t, err)
		require.NoError(t, a.(*net.UnixConn).CloseWrite())
		b, err := io.ReadAll(a)
		require.NoError(t, err)
		return string(b)
	}
	require.Contains(t, apiCall(`{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "127.0.0.1", "host_port": 0, "guest_port": 7}}`), "guest_addr: required")
	require.Contains(t, apiCall(`{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "127.0.0.1", "host_port": 0, "guest_addr": "198.19.9.99", "guest_port": 7}}`), "no peer's AllowedIPs covers")
	require.Equal(t, `{"return":{"id":1}}`, apiCall(`{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "127.0.0.1", "host_port": 0, "guest_addr": "`+clientAddr.String()+`", "guest_port": 7}}`))
	list := w.pf.List()
	require.Len(t, list, 1)
	require.Contains(t, apiCall(`{"execute": "list_hostfwd"}`), `"guest_addr":"198.19.9.2","guest_port":7`)
	af, err := net.Dial("tcp", list[0].Addr.String())
	require.NoError(t, err)
	require.NoError(t, af.SetDeadline(time.Now().Add(30*time.Second)))
	require.NoError(t, xfer.RoundTrip(af, af, []byte("through the API's forward")))
	af.Close()
	require.Equal(t, `{"return":{}}`, apiCall(`{"execute": "remove_hostfwd", "arguments": {"id": 1}}`))

	// The metrics count the relay's flows.
	resp, err := http.Get("http://" + w.prom.Addr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `ustack_tun_flows_opened_total{proto="tcp"}`)

	// A flow to another address in the tunnel is refused, not relayed
	// to the host's network.
	_, err = cnet.DialContext(ctx, "tcp", "198.19.9.77:80")
	require.Error(t, err)

	w.close()
	out := stderr.String()
	require.NotContains(t, out, privExit)
	require.Contains(t, out, "the host's loopback at 198.19.9.1")
	require.Contains(t, out, "tcp flows 4 (now 0), udp mappings 1")
	require.Contains(t, out, "port forwards 2 (failed 0)")
	require.Contains(t, out, "refused: denied 1")
	require.Contains(t, out, "peer "+pubClient+": endpoint 127.0.0.1:")
}

// socksDial connects to dst through the SOCKS5 server with x/net/proxy's
// client.
func socksDial(server string, auth *proxy.Auth, dst string) (net.Conn, error) {
	d, err := proxy.SOCKS5("tcp", server, auth, &net.Dialer{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.(proxy.ContextDialer).DialContext(ctx, "tcp", dst)
}

// httpTestServer answers "hello PATH" on ln until closed.
func httpTestServer(ln net.Listener) *http.Server {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	})}
	go srv.Serve(ln)
	return srv
}

// httpGetVia fetches url through the HTTP proxy at proxyURL.
func httpGetVia(t *testing.T, proxyURL, url string) (int, string) {
	t.Helper()
	pu, err := neturl.Parse(proxyURL)
	require.NoError(t, err)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
