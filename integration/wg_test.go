//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/xfer"
)

// The WireGuard tests' addresses: the veth between the exit node's
// namespace and the peer's carries the tunnel's UDP; the tunnel is
// 198.19.100.0/24; 198.18.60.1 is an address on the exit namespace's
// loopback that the relay reaches as any destination.
var (
	wgVethExit = netip.MustParsePrefix("198.18.50.1/24")
	wgVethPeer = netip.MustParsePrefix("198.18.50.2/24")
	wgExitAddr = netip.MustParsePrefix("198.19.100.1/24")
	wgPeerAddr = netip.MustParsePrefix("198.19.100.2/24")
	wgDNSAddr  = netip.MustParseAddr("198.19.100.53")
	wgFarAddr  = netip.MustParsePrefix("198.18.60.1/32")
	// wgClientAddr is the benchmark client's tunnel address.
	wgClientAddr = netip.MustParseAddr("198.19.100.3")
)

// Fixed ports, below 32768, in namespaces of the test's own.
const (
	wgExitPort  = 20061
	wgPeerPort  = 20062
	wgSOCKSPort = 21080
	wgHTTPPort  = 21081
	wgLTCPPort  = 21082
	wgLUDPPort  = 21083
	wgPFwdPort  = 21084
	wgEchoPort  = 7000
	wgBenchPort = 5300
)

// buildWireguardGo builds the wireguard-go program from the module the
// project requires, into the test's temporary directory.
func buildWireguardGo(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "wireguard-go")
	out, err := exec.Command("go", "build", "-o", bin, "golang.zx2c4.com/wireguard").CombinedOutput()
	require.NoError(tb, err, "build wireguard-go: %s", out)
	return bin
}

// wgKeys returns a fresh key pair in base64, as wg genkey and wg pubkey
// print them.
func wgKeys(tb testing.TB) (private, public string) {
	tb.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(tb, err)
	return base64.StdEncoding.EncodeToString(k.Bytes()), base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
}

// wgPeer is the real peer: the wireguard-go program on a kernel TUN
// device in a namespace of its own, configured with wg and ip, its
// default route through the tunnel.
type wgPeer struct {
	ns    *netns.NS
	iface string
	cmd   *exec.Cmd
	done  chan struct{}
}

// startWGPeer runs wireguard-go in ns on a TUN device with the tunnel
// address addr, whose one peer, the exit node, is at endpoint with the
// public key exitPub; every route but the endpoint's goes through it.
func startWGPeer(t *testing.T, bin string, ns *netns.NS, addr netip.Prefix, priv, exitPub string, endpoint netip.AddrPort) *wgPeer {
	t.Helper()
	p := &wgPeer{ns: ns, iface: fmt.Sprintf("uwg%d", os.Getpid()%100000), done: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", ns.Name, bin, "-f", p.iface)
	p.cmd.Env = append(os.Environ(), "LOG_LEVEL=error")
	// Its banner (the kernel has a WireGuard module of its own, or
	// could) and errors are shown if the test fails.
	var out syncBuffer
	p.cmd.Stdout, p.cmd.Stderr = &out, &out
	require.NoError(t, p.cmd.Start())
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("wireguard-go said:\n%s", out.String())
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	// wireguard-go is ready once wg can talk to it.
	require.Eventually(t, func() bool {
		return exec.Command("ip", "netns", "exec", ns.Name, "wg", "show", p.iface).Run() == nil
	}, 20*time.Second, 20*time.Millisecond, "wireguard-go did not come up")
	conf := filepath.Join(t.TempDir(), "peer.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[Interface]\nPrivateKey = %s\nListenPort = %d\n\n[Peer]\nPublicKey = %s\nEndpoint = %s\nAllowedIPs = 0.0.0.0/0\n",
		priv, wgPeerPort, exitPub, endpoint)), 0o600))
	for _, argv := range [][]string{
		{"wg", "setconf", p.iface, conf},
		{"ip", "addr", "add", addr.String(), "dev", p.iface},
		{"ip", "link", "set", p.iface, "mtu", "1420", "up"},
		{"ip", "route", "add", "default", "dev", p.iface},
	} {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, argv...)...).CombinedOutput()
		require.NoError(t, err, "%v: %s", argv, out)
	}
	return p
}

// in runs argv in the peer's namespace and returns its output.
func (p *wgPeer) in(argv ...string) ([]byte, error) {
	c := exec.Command("ip", append([]string{"netns", "exec", p.ns.Name}, argv...)...)
	c.Stderr = os.Stderr
	return c.Output()
}

// socksAssociate exchanges msg with dst through a SOCKS5 server's UDP
// ASSOCIATE, with a client written here (x/net/proxy has none), from ns.
func socksAssociate(t *testing.T, ns *netns.NS, server string, dst netip.AddrPort, msg []byte) []byte {
	t.Helper()
	c, err := (&nsDialer{ns}).Dial("tcp", server)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Write([]byte{5, 1, 0}) // SOCKS5, one method: no authentication
	require.NoError(t, err)
	var b [4 + 4 + 2]byte
	_, err = io.ReadFull(c, b[:2])
	require.NoError(t, err)
	require.Equal(t, []byte{5, 0}, b[:2])
	_, err = c.Write([]byte{5, 3, 0, 1, 0, 0, 0, 0, 0, 0}) // UDP ASSOCIATE, from an address not known yet
	require.NoError(t, err)
	_, err = io.ReadFull(c, b[:])
	require.NoError(t, err)
	require.Equal(t, []byte{5, 0, 0, 1}, b[:4], "an IPv4 relay address")
	relay := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[8:]))
	var u net.Conn
	require.NoError(t, ns.Do(func() (err error) {
		u, err = net.Dial("udp", relay.String())
		return err
	}))
	defer u.Close()
	hdr := append([]byte{0, 0, 0, 1}, dst.Addr().AsSlice()...)
	hdr = binary.BigEndian.AppendUint16(hdr, dst.Port())
	buf := make([]byte, 2048)
	for try := 0; ; try++ {
		_, err := u.Write(append(hdr, msg...))
		require.NoError(t, err)
		require.NoError(t, u.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, err := u.Read(buf)
		if err != nil && try < 10 {
			continue // a datagram lost: UDP
		}
		require.NoError(t, err)
		require.Equal(t, hdr, buf[:len(hdr)], "the answer names its source")
		return buf[len(hdr):n]
	}
}

// TestWG runs `ustack wg` as an unprivileged user in a namespace of its
// own, confined, against a real peer: the wireguard-go program on a
// kernel TUN device in a second namespace, configured with wg and ip,
// its default route through the tunnel, reaching ustack wg's UDP port
// over a veth. As an exit node, curl in the peer's namespace fetches
// files whole from the exit namespace's loopback (through ustack wg's
// own address, -allow-host-loopback) and from another of its addresses,
// UDP and DNS work and pings are relayed; as a client, SOCKS5 (TCP and
// UDP), -L (TCP and UDP) and -p reach a server that lives only behind
// the peer; and the relay process is under its filter, with an empty
// root, while traffic flows.
func TestWG(t *testing.T) {
	requireNamespaces(t)
	for _, tool := range [][2]string{{"wg", "wireguard-tools"}, {"curl", "curl"}, {"dig", "dnsutils"}, {"ping", "iputils-ping"}} {
		needTool(t, tool[0], tool[1])
	}
	r := setupRootless(t)
	wgBin := buildWireguardGo(t)

	exitNS, err := netns.New("wgexit")
	require.NoError(t, err)
	defer exitNS.Close()
	peerNS, err := netns.New("wgpeer")
	require.NoError(t, err)
	defer peerNS.Close()
	require.NoError(t, netns.Veth(exitNS, "wgx0", peerNS, "wgp0", 0))
	require.NoError(t, exitNS.AddAddr("wgx0", wgVethExit))
	require.NoError(t, peerNS.AddAddr("wgp0", wgVethPeer))
	require.NoError(t, exitNS.AddAddr("lo", wgFarAddr))
	// The relay's pings go out through ICMP datagram sockets, which the
	// user's group may open in the exit namespace.
	require.NoError(t, exitNS.Sysctl("ipv4/ping_group_range", fmt.Sprintf("%d %d", r.cred.Gid, r.cred.Gid)))

	hs := startHostServicesIn(t, exitNS, netip.MustParseAddr("127.0.0.1"))
	far := startHostServicesIn(t, exitNS, wgFarAddr.Addr())

	exitPriv, exitPub := wgKeys(t)
	peerPriv, peerPub := wgKeys(t)
	conf := filepath.Join(r.dir, "exit.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[Interface]\nPrivateKey = %s\nListenPort = %d\nAddress = %s\nDNS = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = %s/32\n",
		exitPriv, wgExitPort, wgExitAddr, wgDNSAddr, peerPub, wgPeerAddr.Addr())), 0o600))
	require.NoError(t, os.Chown(conf, r.uid, int(r.cred.Gid)))

	peerEcho := netip.AddrPortFrom(wgPeerAddr.Addr(), wgEchoPort)
	c := r.cmd(r.bin, "wg", "-config", conf, "-stats", "-allow-host-loopback", "-dns-upstream", hs.dns.String(),
		"-socks", fmt.Sprintf("127.0.0.1:%d", wgSOCKSPort), "-http", fmt.Sprintf("127.0.0.1:%d", wgHTTPPort),
		"-L", fmt.Sprintf("%d:%s", wgLTCPPort, peerEcho), "-L", fmt.Sprintf("%d:%s/udp", wgLUDPPort, peerEcho),
		"-p", fmt.Sprintf("%d:%s", wgPFwdPort, peerEcho))
	var stderr syncBuffer
	c.Stderr = &stderr
	require.NoError(t, exitNS.Do(c.Start), "start ustack wg in the exit namespace")
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	stopped := false
	defer func() {
		if !stopped {
			c.Process.Kill()
			<-exited
		}
	}()
	relay := relayOf(t, c.Process.Pid)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "pings are relayed") }, 20*time.Second, 20*time.Millisecond,
		"ustack wg did not start: %s", &stderr)

	peer := startWGPeer(t, wgBin, peerNS, wgPeerAddr, peerPriv, exitPub, netip.AddrPortFrom(wgVethExit.Addr(), wgExitPort))
	// The server behind the peer: an echo on every address of its
	// namespace, which the exit namespace reaches only through the
	// tunnel (it has no route to 198.19.100.0/24).
	echo := childCmd(t, []string{"ip", "netns", "exec", peerNS.Name}, "echo-server", fmt.Sprint(wgEchoPort))
	echoIn, err := echo.StdinPipe()
	require.NoError(t, err)
	echoOut, err := echo.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, echo.Start())
	defer func() { echoIn.Close(); echo.Wait() }()
	line, err := bufio.NewReader(echoOut).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	exitHost := func(ap netip.AddrPort) string { return netip.AddrPortFrom(wgExitAddr.Addr(), ap.Port()).String() }
	fetch := func(url string, n int64) {
		t.Helper()
		out, err := peer.in("curl", "-sS", "--max-time", "120", "-o", "-", url)
		require.NoError(t, err, "curl %s", url)
		sum := sha256.Sum256(out)
		require.Equal(t, fmt.Sprintf("%s %d", patternSum(n), n), fmt.Sprintf("%s %d", hex.EncodeToString(sum[:]), len(out)), "curl %s", url)
	}

	t.Run("exit node", func(t *testing.T) {
		n := sized(32 << 20)
		// The host's loopback, at ustack wg's own address.
		fetch(fmt.Sprintf("http://%s/bytes/%d", exitHost(hs.http), n), n)
		// Any other destination, relayed from a host socket.
		fetch(fmt.Sprintf("http://%s/bytes/%d", far.http, n), n)

		// UDP from the peer's namespace, datagrams up to the largest the
		// tunnel carries unfragmented (the relay does not fragment
		// answers: larger ones are dropped and counted).
		var u net.Conn
		require.NoError(t, peerNS.Do(func() (err error) {
			u, err = net.Dial("udp", exitHost(hs.udp))
			return err
		}))
		defer u.Close()
		for _, size := range []int{1, 100, 1000, 1420 - 28} {
			msg := bytes.Repeat([]byte{byte(size)}, size)
			var got []byte
			buf := make([]byte, 2048)
			for try := 0; try < 10 && got == nil; try++ {
				_, err := u.Write(msg)
				require.NoError(t, err)
				require.NoError(t, u.SetReadDeadline(time.Now().Add(2*time.Second)))
				if n, err := u.Read(buf); err == nil {
					got = buf[:n]
				}
			}
			require.Equal(t, msg, got, "a datagram of %d bytes echoed", size)
		}

		dig, err := peer.in("dig", "+short", "+time=5", "+tries=3", "@"+wgDNSAddr.String(), strings.TrimSuffix(dnsName, "."), "A")
		require.NoError(t, err)
		require.Equal(t, dnsA.String(), strings.TrimSpace(string(dig)))

		ping, err := peer.in("ping", "-c", "2", "-W", "5", wgFarAddr.Addr().String())
		require.NoError(t, err, "%s", ping)
		require.Contains(t, string(ping), "2 received")
	})

	t.Run("client", func(t *testing.T) {
		socks := fmt.Sprintf("127.0.0.1:%d", wgSOCKSPort)
		d, err := proxy.SOCKS5("tcp", socks, nil, &nsDialer{exitNS})
		require.NoError(t, err)
		sc, err := d.Dial("tcp", peerEcho.String())
		require.NoError(t, err)
		require.NoError(t, sc.SetDeadline(time.Now().Add(30*time.Second)))
		require.NoError(t, xfer.RoundTrip(sc, sc, bytes.Repeat([]byte("through socks "), 10000)))
		sc.Close()
		require.Equal(t, "over socks udp", string(socksAssociate(t, exitNS, socks, peerEcho, []byte("over socks udp"))))

		for _, proto := range []string{"tcp", "udp"} {
			port := wgLTCPPort
			if proto == "udp" {
				port = wgLUDPPort
			}
			var lc net.Conn
			require.NoError(t, exitNS.Do(func() (err error) {
				lc, err = net.Dial(proto, fmt.Sprintf("127.0.0.1:%d", port))
				return err
			}))
			require.NoError(t, lc.SetDeadline(time.Now().Add(30*time.Second)))
			require.NoError(t, xfer.RoundTrip(lc, lc, []byte("through -L "+proto)), "-L %s", proto)
			lc.Close()
		}
		var pc net.Conn
		require.NoError(t, exitNS.Do(func() (err error) {
			pc, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", wgPFwdPort))
			return err
		}))
		require.NoError(t, pc.SetDeadline(time.Now().Add(30*time.Second)))
		require.NoError(t, xfer.RoundTrip(pc, pc, bytes.Repeat([]byte("through -p "), 10000)))
		pc.Close()
	})

	t.Run("benchmark client", func(t *testing.T) {
		// scripts/wg.sh's client, with either netstack, against the same
		// peer, to a server behind it.
		clientPriv, clientPub := wgKeys(t)
		_, err := peer.in("wg", "set", peer.iface, "peer", clientPub, "allowed-ips", wgClientAddr.String()+"/32")
		require.NoError(t, err)
		server := netip.AddrPortFrom(wgPeerAddr.Addr(), wgBenchPort)
		srv := childCmd(t, []string{"ip", "netns", "exec", peerNS.Name}, "wgserver", server.String())
		srvOut, err := srv.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, srv.Start())
		defer func() { srv.Process.Kill(); srv.Wait() }()
		line, err := bufio.NewReader(srvOut).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		for _, stack := range []string{"wgnet", "netstack"} {
			for _, test := range []string{"download", "upload", "rr"} {
				n := "1048576"
				if test == "rr" {
					n = "100"
				}
				cl := childCmd(t, []string{"ip", "netns", "exec", exitNS.Name}, "wgclient", "-stack", stack, "-key", clientPriv, "-peer", peerPub,
					"-endpoint", netip.AddrPortFrom(wgVethPeer.Addr(), wgPeerPort).String(), "-addr", wgClientAddr.String(), "-server", server.String(), "-test", test, "-n", n)
				out, err := cl.Output()
				require.NoError(t, err, "%s %s", stack, test)
				var res struct {
					Stack      string  `json:"stack"`
					Bytes      int64   `json:"bytes"`
					RoundTrips int     `json:"round_trips"`
					Seconds    float64 `json:"seconds"`
				}
				require.NoError(t, json.Unmarshal(out, &res), "%s", out)
				require.Equal(t, stack, res.Stack)
				if test == "rr" {
					require.Equal(t, 100, res.RoundTrips)
				} else {
					require.Equal(t, int64(1<<20), res.Bytes)
				}
				require.Positive(t, res.Seconds)
			}
		}
	})

	t.Run("confined", func(t *testing.T) {
		// While a download flows, the relay is under its filter and sees
		// an empty root.
		n := sized(64 << 20)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		curl := exec.CommandContext(ctx, "ip", "netns", "exec", peerNS.Name, "curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}",
			fmt.Sprintf("http://%s/bytes/%d", exitHost(hs.http), n))
		var got bytes.Buffer
		curl.Stdout = &got
		require.NoError(t, curl.Start())
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", relay))
		require.NoError(t, err)
		require.Contains(t, string(b), "Seccomp:\t2", "the relay is not under its seccomp filter")
		require.Contains(t, string(b), "NoNewPrivs:\t1")
		requireEmptyRoot(t, relay)
		require.NoError(t, curl.Wait())
		require.Equal(t, fmt.Sprint(n), got.String())
	})

	require.NoError(t, c.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		stopped = true
	case <-time.After(30 * time.Second):
		t.Fatal("ustack wg did not exit after SIGTERM")
	}
	out := stderr.String()
	t.Logf("ustack wg said:\n%s", out)
	require.NotContains(t, out, exitPriv, "the private key was printed")
	require.Contains(t, out, "pings up 2 down 2")
	require.Regexp(t, `dns queries [1-9]`, out)
	require.Contains(t, out, "peer "+peerPub+": endpoint "+wgVethPeer.Addr().String())
	require.Contains(t, out, "socks5 connects 1 (failed 0), udp associations 1")
}
