package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// TestParseTunWG checks ustack tun -wg: the DNS the sandbox gets, where
// -fwmark goes, and what is refused with it, with no key in any message.
func TestParseTunWG(t *testing.T) {
	priv, _ := wgKey(t)
	_, peerPub := wgKey(t)
	dir := t.TempDir()
	client := writeConf(t, dir, "client.conf", fmt.Sprintf(`[Interface]
PrivateKey = %s
Address = 198.19.100.3/32
DNS = 198.19.100.53, fd00:19::53

[Peer]
PublicKey = %s
Endpoint = 203.0.113.9:51820
AllowedIPs = 0.0.0.0/0, ::/0
`, priv, peerPub))
	noDNS := writeConf(t, dir, "nodns.conf", "[Interface]\nPrivateKey = "+priv+"\nAddress = 198.19.100.3/32\n[Peer]\nPublicKey = "+peerPub+"\nAllowedIPs = 0.0.0.0/0\n")
	marked := writeConf(t, dir, "marked.conf", "[Interface]\nPrivateKey = "+priv+"\nAddress = 198.19.100.3/32\nFwMark = 0x10\nDNS = 198.19.100.53\n[Peer]\nPublicKey = "+peerPub+"\nAllowedIPs = 0.0.0.0/0\n")

	for _, tc := range []struct {
		name  string
		args  []string
		err   string
		check func(t *testing.T, r sandboxRun)
	}{
		{"the file's DNS", []string{"-wg", client}, "", func(t *testing.T, r sandboxRun) {
			require.Equal(t, netip.MustParseAddrPort("198.19.100.53:53"), r.cfg.DNSUpstream)
			require.Contains(t, r.wg.Note, "DNS through it to 198.19.100.53:53")
			require.Contains(t, r.wg.Note, "peer at 203.0.113.9:51820")
		}},
		{"-dns-upstream wins", []string{"-wg", client, "-dns-upstream", "198.19.0.1"}, "", func(t *testing.T, r sandboxRun) {
			require.Equal(t, netip.MustParseAddrPort("198.19.0.1:53"), r.cfg.DNSUpstream)
		}},
		{"DNS off", []string{"-wg", noDNS, "-dns-upstream", "off"}, "", func(t *testing.T, r sandboxRun) {
			require.True(t, r.cfg.NoDNS)
			require.Contains(t, r.wg.Note, "DNS refused")
		}},
		{"-fwmark marks wireguard-go's sockets", []string{"-wg", client, "-fwmark", "0x42"}, "", func(t *testing.T, r sandboxRun) {
			require.Zero(t, r.cfg.Mark, "the relay opens no host sockets to mark")
			c, err := wgconf.Parse(r.wg.Config)
			require.NoError(t, err)
			require.Equal(t, uint32(0x42), c.Interface.FwMark)
		}},
		{"the same mark twice", []string{"-wg", marked, "-fwmark", "16"}, "", nil},
		{"no DNS", []string{"-wg", noDNS}, "no [Interface] DNS, and no -dns-upstream", nil},
		{"two marks", []string{"-wg", marked, "-fwmark", "0x42"}, "-fwmark 66 and " + marked + "'s FwMark 16: give one", nil},
		{"with a proxy", []string{"-wg", client, "-proxy", "socks5://127.0.0.1:1080"}, "-proxy with -wg", nil},
		{"with an interface", []string{"-wg", client, "-interface", "eth0"}, "-interface with -wg", nil},
		{"with the host's loopback", []string{"-wg", client, "-allow-host-loopback"}, "-allow-host-loopback with -wg", nil},
		{"no file", []string{"-wg", dir + "/missing.conf"}, "-wg open " + dir + "/missing.conf: no such file", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			r, status, ok := parseTun(append(tc.args, "--", "true"), &stderr)
			require.NotContains(t, stderr.String(), priv)
			if tc.err != "" {
				require.False(t, ok)
				require.Equal(t, 2, status)
				require.Contains(t, stderr.String(), tc.err)
				return
			}
			require.True(t, ok, "%s", &stderr)
			require.NotNil(t, r.wg)
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}
