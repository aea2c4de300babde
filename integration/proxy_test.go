//go:build linux

package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/internal/microsocks"
	"github.com/ustack-dev/ustack/sandbox"
)

// microsocksOut is the address microsocks binds its outgoing connections
// to (-b): the host's loopback, but never the source of a connection the
// relay makes itself, so a peer seen from it came through the proxy.
var microsocksOut = netip.MustParseAddr("127.0.0.2")

// startMicrosocks runs Debian's microsocks, a real SOCKS5 server, on
// 127.0.0.1 with its outgoing connections from microsocksOut, with
// credentials if user is not empty, until the test ends. It returns its
// address.
func startMicrosocks(t *testing.T, user, pass string) netip.AddrPort {
	t.Helper()
	return microsocks.Start(t, &microsocks.Options{User: user, Pass: pass, Bind: microsocksOut})
}

// peerLog records the remote address of every connection a listener
// accepted.
type peerLog struct {
	net.Listener
	mu    sync.Mutex
	peers []netip.AddrPort
}

// Accept implements net.Listener.
func (l *peerLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.peers = append(l.peers, c.RemoteAddr().(*net.TCPAddr).AddrPort())
		l.mu.Unlock()
	}
	return c, err
}

// seen returns the peers so far.
func (l *peerLog) seen() []netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]netip.AddrPort(nil), l.peers...)
}

// startBodyServer serves /bytes/N (N pattern bytes) over HTTP on
// 127.0.0.1 until the test ends, recording the peers it accepts.
func startBodyServer(t *testing.T) (netip.AddrPort, *peerLog) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pl := &peerLog{Listener: ln}
	srv := &http.Server{Handler: patternBytes}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(pl) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).AddrPort(), pl
}

// connectProxy is an HTTP CONNECT proxy on 127.0.0.1: it records the
// local address of each tunnel it dials, so a test can tell its
// connections from anyone else's.
type connectProxy struct {
	addr netip.AddrPort
	mu   sync.Mutex
	outs []netip.AddrPort
}

// startConnectProxy runs a connectProxy until the test ends.
func startConnectProxy(t *testing.T) *connectProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &connectProxy{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	acceptLoop(&wg, ln, func(c net.Conn) { p.serve(c.(*net.TCPConn)) })
	return p
}

// serve carries one CONNECT tunnel.
func (p *connectProxy) serve(c *net.TCPConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", req.Host, 10*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	p.mu.Lock()
	p.outs = append(p.outs, up.LocalAddr().(*net.TCPAddr).AddrPort())
	p.mu.Unlock()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, br) // what the client sent past its request, then the rest
		up.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, up)
	c.CloseWrite()
	<-done
}

// tunnels returns the local addresses of the tunnels dialed so far.
func (p *connectProxy) tunnels() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netip.AddrPort(nil), p.outs...)
}

// curlThroughTun runs curl in a sandbox of `ustack tun` with the flags
// given, fetching url into a file, and returns the file's sha256 and
// size, curl's error and ustack's standard error.
func curlThroughTun(t *testing.T, bin string, flags []string, url string) (sum string, size int64, stderr string, err error) {
	body := filepath.Join(t.TempDir(), "body")
	args := append(append([]string{"tun", "-stats"}, flags...), "--", "curl", "-sS", "--max-time", "120", "-o", body, url)
	cmd := exec.Command(bin, args...)
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return "", 0, errb.String(), err
	}
	f, err := os.Open(body)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	size, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil)), size, errb.String(), nil
}

// TestTunProxySOCKS5 runs curl in `ustack tun -proxy socks5://` through
// microsocks, which wants credentials: the body arrives intact, the
// server's one connection came from microsocks' outgoing socket, and
// without the right password nothing gets through.
func TestTunProxySOCKS5(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	needTool(t, "curl", "curl")
	socks := startMicrosocks(t, "bob", "pa55")
	bin := buildUstack(t)
	srv, peers := startBodyServer(t)
	size := sized(64 << 20)
	url := fmt.Sprintf("http://%s/bytes/%d", netip.AddrPortFrom(sandbox.DefaultGateway4, srv.Port()), size)

	flags := []string{"-allow-host-loopback", "-proxy", "socks5://bob:pa55@" + socks.String()}
	sum, n, stderr, err := curlThroughTun(t, bin, flags, url)
	require.NoError(t, err, "curl through microsocks: %s", stderr)
	require.Equal(t, size, n)
	require.Equal(t, patternSum(size), sum)
	seen := peers.seen()
	require.Len(t, seen, 1, "one connection reached the server")
	require.Equal(t, microsocksOut, seen[0].Addr(), "the connection came from microsocks' outgoing socket (-b), not from the relay")

	for _, bad := range []string{"socks5://bob:wrong@", "socks5://"} {
		flags := []string{"-allow-host-loopback", "-proxy", bad + socks.String()}
		_, _, stderr, err := curlThroughTun(t, bin, flags, url)
		require.Error(t, err, "%s: microsocks refuses the wrong credentials", bad)
		require.Contains(t, stderr, "connects failed 1", "%s: the refused connect is counted", bad)
		require.Len(t, peers.seen(), 1, "%s: nothing reached the server", bad)
	}
}

// TestTunProxyHTTPConnect runs curl in `ustack tun -proxy http://`
// through the test's CONNECT proxy: the body arrives intact and the
// server's one connection is the proxy's one tunnel.
func TestTunProxyHTTPConnect(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	needTool(t, "curl", "curl")
	proxy := startConnectProxy(t)
	bin := buildUstack(t)
	srv, peers := startBodyServer(t)
	size := sized(64 << 20)
	url := fmt.Sprintf("http://%s/bytes/%d", netip.AddrPortFrom(sandbox.DefaultGateway4, srv.Port()), size)

	sum, n, stderr, err := curlThroughTun(t, bin, []string{"-allow-host-loopback", "-proxy", "http://" + proxy.addr.String()}, url)
	require.NoError(t, err, "curl through the CONNECT proxy: %s", stderr)
	require.Equal(t, size, n)
	require.Equal(t, patternSum(size), sum)
	tunnels := proxy.tunnels()
	require.Len(t, tunnels, 1, "the proxy served one tunnel")
	require.Equal(t, tunnels, peers.seen(), "the server's one connection is the proxy's tunnel")

	// The policy still applies to what the sandbox asked for: without
	// -allow-host-loopback the gateway is refused before the proxy is
	// asked.
	_, _, stderr, err = curlThroughTun(t, bin, []string{"-proxy", "http://" + proxy.addr.String()}, url)
	require.Error(t, err)
	require.Contains(t, stderr, "host_loopback 1")
	require.Len(t, proxy.tunnels(), 1, "the proxy was not asked")
}

// startTCPResolver runs a DNS server for dnsZone on 127.0.0.1 that
// listens on TCP only until the test ends, recording the peers it
// accepts.
func startTCPResolver(t *testing.T) (netip.AddrPort, *peerLog) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pl := &peerLog{Listener: ln}
	dns := dnstest.New(dnsZone)
	dns.ServeStream(pl)
	t.Cleanup(func() { dns.Close() })
	return ln.Addr().(*net.TCPAddr).AddrPort(), pl
}

// TestTunProxyDNS resolves a name inside `ustack tun -proxy socks5://`
// with UDP refused: glibc's query over UDP to the sandbox's DNS address
// reaches a resolver that listens on TCP only, through microsocks.
func TestTunProxyDNS(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	needTool(t, "getent", "libc-bin")
	socks := startMicrosocks(t, "", "")
	bin := buildUstack(t)
	res, peers := startTCPResolver(t)

	cmd := exec.Command(bin, "tun", "-stats", "-proxy", "socks5://"+socks.String(), "-dns-upstream", res.String(), "--",
		"getent", "hosts", strings.TrimSuffix(dnsName, "."))
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	require.NoError(t, err, "getent hosts in the sandbox: %s", errb.String())
	fields := strings.Fields(string(out))
	require.NotEmpty(t, fields)
	require.Contains(t, []string{dnsA.String(), dnsAAAA.String()}, fields[0], "the resolver's answer: %s", out)
	seen := peers.seen()
	require.NotEmpty(t, seen)
	for _, p := range seen {
		require.Equal(t, microsocksOut, p.Addr(), "every query came through microsocks")
	}
	require.NotContains(t, errb.String(), "dns queries 0")
}

// TestTunProxyUDP: through a proxy, UDP is refused and counted by
// default (-proxy-udp refuse) and relayed to host sockets with
// -proxy-udp direct.
func TestTunProxyUDP(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	socks := startMicrosocks(t, "", "")
	bin := buildUstack(t)
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	echo := netip.AddrPortFrom(sandbox.DefaultGateway4, hs.udp.Port()).String()
	flags := []string{bin, "tun", "-stats", "-allow-host-loopback", "-proxy", "socks5://" + socks.String()}

	cmd := childCmd(t, append(flags, "--"), "udpsend", echo)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	require.NoError(t, err, errb.String())
	require.Equal(t, "sent\n", string(out))
	require.Contains(t, errb.String(), "refused: unsupported 1\n", "the datagram was refused and counted")

	errb.Reset()
	cmd = childCmd(t, append(flags, "-proxy-udp", "direct", "--"), "udpecho", echo)
	cmd.Stderr = &errb
	out, err = cmd.Output()
	require.NoError(t, err, errb.String())
	require.Equal(t, "ok\n", string(out), "UDP relayed to the host with -proxy-udp direct")
	require.NotContains(t, errb.String(), "unsupported")
}
