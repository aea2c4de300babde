//go:build linux

package integration

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/netns/netnstest"
)

// TestTunHostMode runs `ustack tun -host` as tun2socks runs: a TUN
// device in the namespace the command runs in (H), no namespace of its
// own, and a default route through the device that the test adds. The
// relay's own sockets must then not follow that route back into the
// device: -interface binds them to H's real link, -fwmark marks them for
// a routing rule. A world namespace (W) behind that link serves HTTP, UDP
// echo and pings on an address reachable only through H's routes; the
// test fetches, echoes and pings it from H through the device, and W
// counts, per protocol, what arrived from H's link address: TCP, UDP and
// ICMP all left on the real interface.
func TestTunHostMode(t *testing.T) {
	needPrivilege(t, "ustack tun -host makes a TUN device and routes", netns.Probe())
	needTool(t, "nft", "nftables")
	needTool(t, "ping", "iputils-ping")
	bin := buildUstack(t)
	self, err := os.Executable()
	require.NoError(t, err)
	server := netip.MustParseAddr("198.19.5.5")
	for _, tc := range []struct {
		name  string
		flags []string
		route []string // how H keeps the relay's sockets on its link
	}{
		{"interface", []string{"-interface", "h0"}, []string{"ip route add default via 203.0.113.2 dev h0 metric 200"}},
		{"fwmark", []string{"-fwmark", "0x42"}, []string{"ip route add default via 203.0.113.2 dev h0 table 100", "ip rule add fwmark 0x42 lookup 100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := netnstest.New(t, "ustack-host-h")
			w := netnstest.New(t, "ustack-host-w")
			require.NoError(t, netns.Veth(h, "h0", w, "w0", 1500))
			require.NoError(t, h.AddAddr("h0", netip.MustParsePrefix("203.0.113.1/24")))
			require.NoError(t, w.AddAddr("w0", netip.MustParsePrefix("203.0.113.2/24")))
			require.NoError(t, w.AddAddr("lo", netip.PrefixFrom(server, 32)))
			in := func(ns *netns.NS, cmd string) {
				t.Helper()
				out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, strings.Fields(cmd)...)...).CombinedOutput()
				require.NoError(t, err, "%s: %s", cmd, out)
			}
			in(w, "ip route add 198.18.0.0/15 via 203.0.113.1")
			for _, r := range tc.route {
				in(h, r)
			}
			// W counts what comes from H's link address, per protocol.
			nft := "table inet seen {\n chain in {\n  type filter hook input priority 0;\n" +
				"  ip saddr 203.0.113.1 meta l4proto tcp counter\n" +
				"  ip saddr 203.0.113.1 meta l4proto udp counter\n" +
				"  ip saddr 203.0.113.1 meta l4proto icmp counter\n }\n}\n"
			c := exec.Command("ip", "netns", "exec", w.Name, "nft", "-f", "-")
			c.Stdin = strings.NewReader(nft)
			out, err := c.CombinedOutput()
			require.NoError(t, err, "nft: %s", out)
			var hs *hostServices
			require.NoError(t, w.Do(func() error { hs = startHostServices(t, server); return nil }))

			relay := exec.Command("ip", append([]string{"netns", "exec", h.Name, bin, "tun", "-host", "-device", "tun9", "-no-ipv6", "-stats"}, tc.flags...)...)
			var stderr syncBuffer
			relay.Stderr = &stderr
			stdin, err := relay.StdinPipe()
			require.NoError(t, err)
			defer stdin.Close()
			require.NoError(t, relay.Start())
			done := make(chan error, 1)
			go func() { done <- relay.Wait() }()
			stopped := false
			defer func() {
				if !stopped {
					relay.Process.Kill()
					<-done
				}
			}()
			require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "serving") }, 30*time.Second, 20*time.Millisecond, "ustack tun -host did not start: %s", &stderr)
			in(h, "ip route add default via 198.18.0.1 dev tun9 metric 100")

			child := func(mode string, args ...string) string {
				t.Helper()
				c := exec.Command("ip", append([]string{"netns", "exec", h.Name, self}, args...)...)
				c.Env = append(os.Environ(), childEnv+"="+mode)
				out, err := c.CombinedOutput()
				require.NoError(t, err, "%s %v: %s", mode, args, out)
				return string(out)
			}
			n := sized(8 << 20)
			require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), child("fetch", fmt.Sprintf("http://%s/bytes/%d", hs.http, n)))
			child("udpecho", hs.udp.String())
			out, err = exec.Command("ip", "netns", "exec", h.Name, "ping", "-c", "2", "-W", "5", server.String()).CombinedOutput()
			require.NoError(t, err, "ping: %s", out)

			out, err = exec.Command("ip", "netns", "exec", w.Name, "nft", "list", "table", "inet", "seen").CombinedOutput()
			require.NoError(t, err, "%s", out)
			for _, proto := range []string{"tcp", "udp", "icmp"} {
				require.Regexp(t, "l4proto "+proto+` counter packets [1-9]`, string(out), "no %s from H's link: the relay's %s sockets did not leave on it", proto, proto)
			}
			stopped = true
			relay.Process.Signal(os.Interrupt)
			select {
			case err := <-done:
				require.NoError(t, err, "%s", &stderr)
			case <-time.After(30 * time.Second):
				relay.Process.Kill()
				<-done
				t.Fatalf("ustack tun -host did not stop: %s", &stderr)
			}
			require.Contains(t, stderr.String(), "pings up 2 down 2", "the pings went through the relay")
			_, err = net.InterfaceByName("tun9")
			require.Error(t, err, "the device was made in H, not here")
		})
	}
}
