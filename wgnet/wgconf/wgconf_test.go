package wgconf_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/tuntest"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// testKey returns a key of 32 bytes counting up from seed, and its
// base64.
func testKey(seed byte) ([32]byte, string) {
	var k [32]byte
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k, base64.StdEncoding.EncodeToString(k[:])
}

var (
	privRaw, priv = testKey(0x30) // clamped as X25519 private keys are, as wireguard-go stores them
	pskRaw, psk   = testKey(0x60)
	pub1Raw, pub1 = testKey(0x90)
	pub2Raw, pub2 = testKey(0xc0)
)

func prefixes(s ...string) []netip.Prefix {
	var p []netip.Prefix
	for _, x := range s {
		p = append(p, netip.MustParsePrefix(x))
	}
	return p
}

func addrs(s ...string) []netip.Addr {
	var a []netip.Addr
	for _, x := range s {
		a = append(a, netip.MustParseAddr(x))
	}
	return a
}

// fullFile is a client's configuration using every key Parse takes.
var fullFile = `# a laptop's tunnel
[Interface]
PrivateKey = ` + priv + `
ListenPort = 51820
FwMark = 0x10
Address = 198.18.0.2/24, fd00::2/64
Address = 198.18.1.2
DNS = 198.18.0.1, fd00::53
DNS = corp.example.test
MTU = 1380

[Peer]  # the office
PublicKey = ` + pub1 + `
PresharedKey = ` + psk + `
AllowedIPs = 0.0.0.0/0, ::/0
Endpoint = vpn.example.test:51820
PersistentKeepalive = 25

[Peer]
PublicKey = ` + pub2 + `
AllowedIPs = 198.18.7.0/24
AllowedIPs = fd00:7::/48
Endpoint = [fd00::1]:4500
PersistentKeepalive = off
`

var fullConfig = wgconf.Config{
	Interface: wgconf.Interface{
		PrivateKey: privRaw,
		ListenPort: 51820,
		FwMark:     16,
		Addresses:  prefixes("198.18.0.2/24", "fd00::2/64", "198.18.1.2/32"),
		DNS:        addrs("198.18.0.1", "fd00::53"),
		DNSSearch:  []string{"corp.example.test"},
		MTU:        1380,
	},
	Peers: []wgconf.Peer{
		{
			PublicKey:           pub1Raw,
			PresharedKey:        pskRaw,
			AllowedIPs:          prefixes("0.0.0.0/0", "::/0"),
			Endpoint:            wgconf.Endpoint{Host: "vpn.example.test", Port: 51820},
			PersistentKeepalive: 25,
		},
		{
			PublicKey:  pub2Raw,
			AllowedIPs: prefixes("198.18.7.0/24", "fd00:7::/48"),
			Endpoint:   wgconf.Endpoint{Host: "fd00::1", Port: 4500},
		},
	},
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name string
		file string
		want wgconf.Config
	}{
		{"full", fullFile, fullConfig},
		{"minimal", "[Interface]\nPrivateKey = " + priv + "\n", wgconf.Config{Interface: wgconf.Interface{PrivateKey: privRaw}}},
		{
			"case-comments-crlf-bom",
			"\uFEFF  # leading comment\r\n\r\n[interface]\r\nprivatekey=" + priv + "   # trailing\r\n" +
				"LISTENPORT = 0\r\nfwmark = off\r\n[ PEER ]\r\npublickey =" + pub1 + "\r\nendPoint = 198.18.0.9:1\r\n" +
				"persistentkeepalive = OFF\r\npresharedkey = " + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\r\n",
			wgconf.Config{
				Interface: wgconf.Interface{PrivateKey: privRaw},
				Peers:     []wgconf.Peer{{PublicKey: pub1Raw, Endpoint: wgconf.Endpoint{Host: "198.18.0.9", Port: 1}}},
			},
		},
		{
			"peers-before-interface",
			"[Peer]\nPublicKey = " + pub1 + "\nAllowedIPs = fd00::5, 198.18.0.5\n[Interface]\nPrivateKey = " + priv + "\nFwMark = 4294967295\n",
			wgconf.Config{
				Interface: wgconf.Interface{PrivateKey: privRaw, FwMark: 1<<32 - 1},
				Peers:     []wgconf.Peer{{PublicKey: pub1Raw, AllowedIPs: prefixes("fd00::5/128", "198.18.0.5/32")}},
			},
		},
		{
			"endpoint-forms",
			"[Interface]\nPrivateKey = " + priv + "\n[Peer]\nPublicKey = " + pub1 + "\nEndpoint = [fe80::1%wg0]:65535\n" +
				"[Peer]\nPublicKey = " + pub2 + "\nEndpoint = [0:0::1]:7\n",
			wgconf.Config{
				Interface: wgconf.Interface{PrivateKey: privRaw},
				Peers: []wgconf.Peer{
					{PublicKey: pub1Raw, Endpoint: wgconf.Endpoint{Host: "fe80::1%wg0", Port: 65535}},
					{PublicKey: pub2Raw, Endpoint: wgconf.Endpoint{Host: "::1", Port: 7}},
				},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := wgconf.Parse([]byte(c.file))
			require.NoError(t, err)
			require.Equal(t, c.want, *got)
			again, err := wgconf.Parse(got.Marshal())
			require.NoError(t, err, "re-parsing:\n%s", got.Marshal())
			require.Equal(t, *got, *again)
		})
	}
}

// ifaceHead and peerHead start a file: an interface, and a peer.
var (
	ifaceHead = "[Interface]\nPrivateKey = " + priv + "\n"
	peerHead  = ifaceHead + "[Peer]\nPublicKey = " + pub1 + "\n"
)

// badFiles are files Parse must refuse, with the line and key the error
// must name and a word of its reason. Each value in them is at least 12
// characters long where it can be, so that TestErrorsShowNoValue can
// look for it in the message.
var badFiles = []struct {
	name   string
	file   string
	line   int
	key    string
	reason string
}{
	{"no-interface", "# nothing\n[Peer]\nPublicKey = " + pub1 + "\n", 4, "[Interface]", "missing"},
	{"empty", "", 1, "[Interface]", "missing"},
	{"no-private-key", "\n[Interface]\nListenPort = 51820\n", 2, "PrivateKey", "missing"},
	{"peer-without-key", ifaceHead + "[Peer]\nAllowedIPs = 198.18.30.0/24\n[Peer]\nPublicKey = " + pub1 + "\n", 3, "PublicKey", "missing"},
	{"last-peer-without-key", ifaceHead + "[Peer]\nEndpoint = 198.18.30.1:51820\n", 3, "PublicKey", "missing"},
	{"duplicate-peer", peerHead + "[Peer]\nPublicKey = " + pub1 + "\n", 5, "PublicKey", "same peer as the [Peer] on line 3"},
	{"private-key-as-public", peerHead + "[Peer]\nPublicKey = " + priv + "\n", 5, "PublicKey", "private key"},
	{"second-interface", ifaceHead + "[Interface]\n", 3, "[Interface]", "second"},
	{"twice", ifaceHead + "MTU = 1420\nMTU = 1280\n", 4, "MTU", "twice"},
	{"unknown-key", ifaceHead + "JunkSize = 123456789012\n", 3, "JunkSize", "unknown key"},
	{"unknown-key-hidden", ifaceHead + priv + "\n", 3, "(a key not shown)", "unknown key"},
	{"pasted-key-as-key", "[Interface]\n" + priv + " = " + psk + "\n", 2, "(a key not shown)", "unknown key"},
	{"unknown-section", ifaceHead + "[Peers]\n", 3, "[Peers]", "unknown section"},
	{"bad-header", "[Interface\nPrivateKey = " + priv + "\n", 1, "section", "alone on its line"},
	{"outside-section", "PrivateKey = " + priv + "\n[Interface]\n", 1, "PrivateKey", "outside a section"},
	{"peer-key-in-interface", ifaceHead + "PublicKey = " + pub1 + "\n", 3, "PublicKey", "belongs in [Peer]"},
	{"interface-key-in-peer", peerHead + "ListenPort = 51820\n", 5, "ListenPort", "belongs in [Interface]"},
	{"postup", ifaceHead + "PostUp = iptables -A FORWARD -i wg0 -j ACCEPT\n", 3, "PostUp", "shell command"},
	{"preup", ifaceHead + "preup = echo hello-there-world\n", 3, "PreUp", "shell command"},
	{"predown", ifaceHead + "PreDown = echo hello-there-world\n", 3, "PreDown", "shell command"},
	{"postdown", ifaceHead + "PostDown = echo hello-there-world\n", 3, "PostDown", "shell command"},
	{"table", ifaceHead + "Table = 123456789012\n", 3, "Table", "routes"},
	{"saveconfig", ifaceHead + "SaveConfig = true\n", 3, "SaveConfig", "write"},
	{"no-equals", "[Interface]\nPrivateKey\n", 2, "PrivateKey", "Key = Value"},
	{"empty-value", "[Interface]\nPrivateKey =\n", 2, "PrivateKey", "no value"},
	{"short-key", "[Interface]\nPrivateKey = " + priv[1:] + "\n", 2, "PrivateKey", "not a base64 WireGuard key"},
	{"key-no-padding", "[Interface]\nPrivateKey = " + priv[:43] + "A\n", 2, "PrivateKey", "not a base64 WireGuard key"},
	{"key-bad-char", "[Interface]\nPrivateKey = *" + priv[1:] + "\n", 2, "PrivateKey", "not a base64 WireGuard key"},
	// The last character before '=' carries 2 bits past the 32 bytes;
	// wg(8) refuses a key that sets them.
	{"key-stray-bits", "[Interface]\nPrivateKey = " + priv[:42] + "B=\n", 2, "PrivateKey", "not a base64 WireGuard key"},
	{"key-too-long", "[Interface]\nPrivateKey = " + base64.StdEncoding.EncodeToString(make([]byte, 33)) + "\n", 2, "PrivateKey", "not a base64 WireGuard key"},
	{"zero-private-key", "[Interface]\nPrivateKey = " + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n", 2, "PrivateKey", "all zeros"},
	{"bad-psk", peerHead + "PresharedKey = " + psk[2:] + "\n", 5, "PresharedKey", "not a base64 WireGuard key"},
	{"bad-public-key", ifaceHead + "[Peer]\nPublicKey = " + pub1[:40] + "\n", 4, "PublicKey", "not a base64 WireGuard key"},
	{"listen-port", ifaceHead + "ListenPort = 6553565535655\n", 3, "ListenPort", "port number"},
	{"fwmark", ifaceHead + "FwMark = 0x1ffffffffff\n", 3, "FwMark", "firewall mark"},
	{"mtu-small", ifaceHead + "MTU = 67\n", 3, "MTU", "not an MTU"},
	{"mtu-word", ifaceHead + "MTU = jumbo-frames-please\n", 3, "MTU", "not an MTU"},
	{"address", ifaceHead + "Address = 198.18.0.2/24, 198.18.0.300/24\n", 3, "Address", "not an IP address or CIDR prefix"},
	{"address-zone", ifaceHead + "Address = fe80::1234%wg0\n", 3, "Address", "not an IP address or CIDR prefix"},
	{"address-empty-item", ifaceHead + "Address = 198.18.0.2/24,\n", 3, "Address", "empty item"},
	{"dns", ifaceHead + "DNS = not a domain name\n", 3, "DNS", "neither an IP address"},
	{"dns-numeric", ifaceHead + "DNS = 198.18.0.1.53\n", 3, "DNS", "neither an IP address"},
	{"allowed-ips", peerHead + "AllowedIPs = 198.18.0.0/33\n", 5, "AllowedIPs", "not an IP address or CIDR prefix"},
	{"endpoint-v6-brackets", peerHead + "Endpoint = fd00::1234:51820\n", 5, "Endpoint", "brackets"},
	{"endpoint-no-port", peerHead + "Endpoint = vpn.example.test\n", 5, "Endpoint", "host:port"},
	{"endpoint-port-0", peerHead + "Endpoint = vpn.example.test:0\n", 5, "Endpoint", "port"},
	{"endpoint-port-name", peerHead + "Endpoint = vpn.example.test:https\n", 5, "Endpoint", "port"},
	{"endpoint-host", peerHead + "Endpoint = vpn example test:51820\n", 5, "Endpoint", "neither an IP address nor a host name"},
	{"keepalive", peerHead + "PersistentKeepalive = 655366553665536\n", 5, "PersistentKeepalive", "interval"},
}

func TestParseRefuses(t *testing.T) {
	for _, c := range badFiles {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := wgconf.Parse([]byte(c.file))
			require.Error(t, err)
			require.Nil(t, cfg)
			var pe *wgconf.ParseError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, c.line, pe.Line, "line: %v", err)
			require.Equal(t, c.key, pe.Key, "key: %v", err)
			require.Contains(t, err.Error(), c.reason)
			require.Contains(t, err.Error(), fmt.Sprintf("line %d: %s: ", c.line, c.key))
		})
	}
}

// secrets are the forms in which a key's bytes could leak into text.
func secrets(k [32]byte) []string {
	b64 := base64.StdEncoding.EncodeToString(k[:])
	return []string{
		b64,
		b64[:20], // a part is a leak too
		hex.EncodeToString(k[:]),
		strings.ToUpper(hex.EncodeToString(k[:])),
		string(k[:]),
		fmt.Sprint(k), // [16 17 ...]
		fmt.Sprintf("%#v", k),
		fmt.Sprintf("%o", k),
	}
}

// TestErrorsShowNoValue checks that no error quotes a value of the file
// (values shorter than 12 characters could occur in a message's own
// words, and are not looked for), nor a key that was given.
func TestErrorsShowNoValue(t *testing.T) {
	for _, c := range badFiles {
		t.Run(c.name, func(t *testing.T) {
			_, err := wgconf.Parse([]byte(c.file))
			require.Error(t, err)
			msg := err.Error()
			for line := range strings.SplitSeq(c.file, "\n") {
				_, v, ok := strings.Cut(line, "=")
				if v = strings.TrimSpace(v); ok && len(v) >= 12 {
					require.NotContains(t, msg, v)
				}
			}
			for _, k := range [][32]byte{privRaw, pskRaw} {
				for _, s := range secrets(k) {
					require.NotContains(t, msg, s)
				}
			}
		})
	}
}

// TestFormatRedacts prints a parsed configuration every way fmt can and
// checks that neither the private nor the preshared key shows, in any
// form; and that Marshal and UAPI, which exist to carry them, do.
func TestFormatRedacts(t *testing.T) {
	cfg, err := wgconf.Parse([]byte(fullFile))
	require.NoError(t, err)
	values := []any{cfg, *cfg, cfg.Interface, &cfg.Interface, cfg.Peers, cfg.Peers[0], &cfg.Peers[0], cfg.Interface.PrivateKey, cfg.Peers[0].PresharedKey}
	var out []string
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b", "%c", "%U", "%20.5v"} {
			out = append(out, fmt.Sprintf(verb, v))
		}
		out = append(out, fmt.Sprint(v), fmt.Sprintln(v))
	}
	out = append(out, cfg.String(), cfg.GoString(), cfg.Interface.PrivateKey.String(), cfg.Interface.PrivateKey.GoString())
	for _, o := range out {
		for _, k := range [][32]byte{privRaw, pskRaw} {
			for _, s := range secrets(k) {
				require.NotContains(t, o, s)
			}
		}
	}
	require.Contains(t, cfg.String(), "PrivateKey = (redacted)")
	require.Contains(t, cfg.String(), "PresharedKey = (redacted)")
	require.Contains(t, cfg.String(), pub1, "public keys are not secret")
	require.Contains(t, string(cfg.Marshal()), priv)
	require.Contains(t, string(cfg.Marshal()), psk)
}

func TestUAPI(t *testing.T) {
	cfg, err := wgconf.Parse([]byte(fullFile))
	require.NoError(t, err)
	hexKey := func(k [32]byte) string { return hex.EncodeToString(k[:]) }
	resolved := map[string]netip.Addr{"vpn.example.test": netip.MustParseAddr("::ffff:198.18.0.99")}
	resolve := func(host string) (netip.Addr, error) {
		a, ok := resolved[host]
		if !ok {
			return netip.Addr{}, os.ErrNotExist
		}
		return a, nil
	}
	got, err := cfg.UAPI(resolve)
	require.NoError(t, err)
	want := "private_key=" + hexKey(privRaw) + "\nlisten_port=51820\nfwmark=16\nreplace_peers=true\n" +
		"public_key=" + hexKey(pub1Raw) + "\npreshared_key=" + hexKey(pskRaw) + "\nendpoint=198.18.0.99:51820\n" +
		"persistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=0.0.0.0/0\nallowed_ip=::/0\n" +
		"public_key=" + hexKey(pub2Raw) + "\nendpoint=[fd00::1]:4500\nreplace_allowed_ips=true\n" +
		"allowed_ip=198.18.7.0/24\nallowed_ip=fd00:7::/48\n"
	require.Equal(t, want, got)

	_, err = cfg.UAPI(nil)
	require.ErrorContains(t, err, "peer 1 (public key "+pub1+")")
	require.ErrorContains(t, err, "resolver")
	require.NotContains(t, err.Error(), priv)

	delete(resolved, "vpn.example.test")
	_, err = cfg.UAPI(resolve)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "peer 1 (public key "+pub1+")")
}

// TestUAPIIpcSet hands UAPI's output to a real wireguard-go device and
// reads it back: wireguard-go takes every line.
func TestUAPIIpcSet(t *testing.T) {
	cfg, err := wgconf.Parse([]byte(fullFile))
	require.NoError(t, err)
	set, err := cfg.UAPI(func(string) (netip.Addr, error) { return netip.MustParseAddr("198.18.0.99"), nil })
	require.NoError(t, err)
	dev := device.NewDevice(tuntest.NewChannelTUN().TUN(), bindtest.NewChannelBinds()[0],
		&device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf})
	defer dev.Close()
	require.NoError(t, dev.IpcSet(set))
	get, err := dev.IpcGet()
	require.NoError(t, err)
	for _, line := range []string{
		// bindtest's binds keep their own port and endpoint form: those
		// lines are not compared.
		"private_key=" + hex.EncodeToString(privRaw[:]),
		"fwmark=16",
		"public_key=" + hex.EncodeToString(pub1Raw[:]),
		"preshared_key=" + hex.EncodeToString(pskRaw[:]),
		"persistent_keepalive_interval=25",
		"allowed_ip=0.0.0.0/0",
		"allowed_ip=::/0",
		"public_key=" + hex.EncodeToString(pub2Raw[:]),
		"allowed_ip=198.18.7.0/24",
		"allowed_ip=fd00:7::/48",
	} {
		require.Contains(t, get, line+"\n")
	}
}

// TestTestdataParses checks the fuzz seeds under testdata: each .conf
// parses (they are the good files the fuzzer starts from).
func TestTestdataParses(t *testing.T) {
	files, err := filepath.Glob("testdata/*.conf")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = wgconf.Parse(b)
		require.NoError(t, err, f)
	}
}

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.conf")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(fullFile))
	for _, c := range badFiles {
		f.Add([]byte(c.file))
	}
	resolve := func(string) (netip.Addr, error) { return netip.MustParseAddr("198.18.0.1"), nil }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := wgconf.Parse(data)
		if err != nil {
			var pe *wgconf.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("not a *ParseError: %v", err)
			}
			if pe.Line < 1 || pe.Line > strings.Count(string(data), "\n")+1 || pe.Key == "" || pe.Reason == "" {
				t.Fatalf("error without a line in the file, a key or a reason: %#v", pe)
			}
			return
		}
		out := cfg.Marshal()
		again, err := wgconf.Parse(out)
		if err != nil {
			t.Fatalf("Marshal's output does not parse: %v\n%s", err, out)
		}
		require.Equal(t, *cfg, *again, "Marshal's output parses to another config:\n%s", out)
		if _, err := cfg.UAPI(resolve); err != nil {
			t.Fatalf("UAPI: %v", err)
		}
		s := cfg.String()
		if k := cfg.Interface.PrivateKey; strings.Contains(s, wgconf.Key(k).String()) {
			t.Fatalf("String shows the private key:\n%s", s)
		}
	})
}
