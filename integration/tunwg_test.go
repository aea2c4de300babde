//go:build linux

package integration

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/netns/netnstest"
)

// TestTunWG runs `ustack tun -wg FILE -- CMD` as an unprivileged user,
// confined, its sandbox's only way out a WireGuard tunnel to a real peer:
// the wireguard-go program on a kernel TUN device in a namespace of its
// own (X), reached over a veth from the namespace ustack runs in (H).
// The services live on an address of X's loopback, which H has no route
// to: from the sandbox, curl's download arrives whole, UDP datagrams echo,
// pings are answered and a name resolves through the DNS server the
// file names, all of it through the tunnel, and the peer counts the
// bytes.
func TestTunWG(t *testing.T) {
	requireNamespaces(t)
	for _, tool := range [][2]string{{"wg", "wireguard-tools"}, {"curl", "curl"}, {"dig", "dnsutils"}, {"ping", "iputils-ping"}} {
		needTool(t, tool[0], tool[1])
	}
	r := setupRootless(t)
	wgBin := buildWireguardGo(t)

	h := netnstest.New(t, "ustack-tunwg-h")
	x := netnstest.New(t, "ustack-tunwg-x")
	require.NoError(t, netns.Veth(h, "twh0", x, "twx0", 0))
	require.NoError(t, h.AddAddr("twh0", wgVethExit))
	require.NoError(t, x.AddAddr("twx0", wgVethPeer))
	require.NoError(t, x.AddAddr("lo", wgFarAddr))
	far := startHostServicesIn(t, x, wgFarAddr.Addr())
	// The tunnel's DNS server, on port 53 of the far address: the file's
	// DNS line names an address, and the sandbox's queries go to its
	// port 53.
	var dc net.PacketConn
	require.NoError(t, x.Do(func() (err error) {
		dc, err = net.ListenPacket("udp", netip.AddrPortFrom(wgFarAddr.Addr(), 53).String())
		return err
	}))
	dns := dnstest.New(dnsZone)
	dns.ServePacket(dc)
	defer dns.Close()

	clientPriv, clientPub := wgKeys(t)
	peerPriv, peerPub := wgKeys(t)
	conf := filepath.Join(r.dir, "client.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[Interface]\nPrivateKey = %s\nListenPort = %d\nAddress = %s/32\nDNS = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s\nAllowedIPs = 0.0.0.0/0, ::/0\n",
		clientPriv, wgExitPort, wgClientAddr, wgFarAddr.Addr(), peerPub, netip.AddrPortFrom(wgVethPeer.Addr(), wgPeerPort))), 0o600))
	require.NoError(t, os.Chown(conf, r.uid, int(r.cred.Gid)))
	peer := startWGPeer(t, wgBin, x, wgPeerAddr, peerPriv, clientPub, netip.AddrPortFrom(wgVethExit.Addr(), wgExitPort))

	n := sized(32 << 20)
	child := func(mode string, args ...string) string {
		return fmt.Sprintf("%s=%s %s %s", childEnv, mode, r.test, strings.Join(args, " "))
	}
	script := strings.Join([]string{
		fmt.Sprintf("curl -sS --max-time 120 http://%s/bytes/%d | sha256sum", far.http, n),
		child("udpecho", far.udp.String()),
		"ping -c 2 -W 5 " + wgFarAddr.Addr().String(),
		"dig +short +time=5 +tries=3 " + strings.TrimSuffix(dnsName, ".") + " A",
	}, " && ")
	// sent is what the peer has sent through the tunnel so far.
	sent := func() int64 {
		out, err := peer.in("wg", "show", peer.iface, "transfer")
		require.NoError(t, err)
		m := regexp.MustCompile(`\s(\d+)\s+(\d+)$`).FindStringSubmatch(strings.TrimSpace(string(out)))
		require.NotNil(t, m, "wg show transfer: %s", out)
		n, _ := strconv.ParseInt(m[2], 10, 64)
		return n
	}
	for _, mode := range []string{"confined", "in process"} {
		t.Run(mode, func(t *testing.T) {
			before := sent()
			c := r.cmd(r.bin, "tun", "-wg", conf, "-stats", "-seccomp="+strconv.FormatBool(mode == "confined"), "--", "sh", "-c", script)
			var stdout, stderr syncBuffer
			c.Stdout, c.Stderr = &stdout, &stderr
			require.NoError(t, h.Do(c.Start), "start ustack tun in H")
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			select {
			case err := <-done:
				require.NoError(t, err, "ustack tun -wg: %s\n%s", &stdout, &stderr)
			case <-time.After(5 * time.Minute):
				c.Process.Kill()
				<-done
				t.Fatalf("ustack tun -wg did not finish: %s\n%s", &stdout, &stderr)
			}
			out, log := stdout.String(), stderr.String()
			t.Logf("ustack tun -wg said:\n%s", log)
			require.Contains(t, out, patternSum(n)+"  -\n", "the download, whole")
			require.Contains(t, out, "2 received", "the pings")
			require.True(t, strings.HasSuffix(out, dnsA.String()+"\n"), "the name resolved through the tunnel's DNS server: %s", out)
			require.NotContains(t, log, clientPriv, "the private key was printed")
			require.Contains(t, log, "flows leave through the WireGuard tunnel")
			require.Contains(t, log, "pings up 2 down 2")
			require.Regexp(t, `dns queries [1-9]`, log)
			require.Contains(t, log, "peer "+peerPub+": endpoint "+netip.AddrPortFrom(wgVethPeer.Addr(), wgPeerPort).String())
			// The peer carried the download.
			require.Greater(t, sent()-before, n, "the peer sent the download through the tunnel")
		})
	}
	// H has no route to the far address: nothing reached it but through
	// the tunnel.
	route, err := exec.Command("ip", "-n", h.Name, "route", "get", wgFarAddr.Addr().String()).CombinedOutput()
	require.Error(t, err, "H must have no route to the far address: %s", route)
}
