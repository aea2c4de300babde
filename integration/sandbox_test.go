//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/netns/netnstest"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/serve"
)

// childEnv makes the test binary, started inside a sandbox, play one of
// the sandbox-side programs of sandboxChild instead of running tests.
const childEnv = "USTACK_TEST_SANDBOX_CHILD"

// The DNS name the tests' resolver answers, its answers, and the zone
// of internal/dnstest that holds them.
const dnsName = "ustack.test."

var (
	dnsA    = netip.MustParseAddr("198.18.7.7")
	dnsAAAA = netip.MustParseAddr("fd00::7:7")
	dnsZone = dnstest.Zone{dnsName: {dnsA, dnsAAAA}}
)

// sandboxChild runs the sandbox-side program named by childEnv, if set,
// and exits; otherwise it returns.
func sandboxChild() {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return
	}
	out, err := childMain(mode, os.Args[1:])
	fmt.Print(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		os.Exit(1)
	}
	os.Exit(0)
}

type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

func childMain(mode string, args []string) (string, error) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch mode {
	case "fetch": // URL: print the body's sha256 and size
		resp, err := http.Get(arg(0))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%x %d\n", h.Sum(nil), n), nil
	case "both": // ADDR N: send N pattern bytes while reading the answer
		n, _ := strconv.ParseInt(arg(1), 10, 64)
		c, err := net.Dial("tcp", arg(0))
		if err != nil {
			return "", err
		}
		defer c.Close()
		werr := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, serve.Pattern(n))
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			werr <- err
		}()
		h := sha256.New()
		got, err := io.Copy(h, c)
		if err != nil {
			return "", err
		}
		if err := <-werr; err != nil {
			return "", err
		}
		return fmt.Sprintf("%x %d\n", h.Sum(nil), got), nil
	case "udpecho": // ADDR: exchange datagrams of many sizes
		c, err := net.Dial("udp", arg(0))
		if err != nil {
			return "", err
		}
		defer c.Close()
		buf := make([]byte, 1<<16)
		for i := range 64 {
			msg := bytes.Repeat([]byte{byte(i)}, 1+(i*997)%9000)
			ok := false
			for try := 0; try < 5 && !ok; try++ {
				if _, err := c.Write(msg); err != nil {
					return "", err
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Read(buf)
				ok = err == nil && bytes.Equal(buf[:n], msg)
			}
			if !ok {
				return "", fmt.Errorf("datagram %d (%d bytes): no echo", i, len(msg))
			}
		}
		return "ok\n", nil
	case "dns": // NAME: look it up through /etc/resolv.conf
		r := &net.Resolver{PreferGo: true}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(ctx, arg(0))
		if err != nil {
			return "", err
		}
		return strings.Join(addrs, " ") + "\n", nil
	case "dial": // ADDR: report how a TCP connect ends
		c, err := net.DialTimeout("tcp", arg(0), 5*time.Second)
		switch {
		case err == nil:
			c.Close()
			return "ok\n", nil
		case errors.Is(err, syscall.ECONNREFUSED):
			return "refused\n", nil
		default:
			return "error: " + err.Error() + "\n", nil
		}
	case "echo-server": // PORT: TCP and UDP echo until stdin closes
		ln, err := net.Listen("tcp", ":"+arg(0))
		if err != nil {
			return "", err
		}
		pc, err := net.ListenPacket("udp", ":"+arg(0))
		if err != nil {
			return "", err
		}
		go xfer.EchoStreams(ln)
		go xfer.EchoPackets(pc)
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		return "", nil
	case "flood": // GW UDPPORT SYNPORT N
		udpPort, _ := strconv.Atoi(arg(1))
		synPort, _ := strconv.Atoi(arg(2))
		n, _ := strconv.Atoi(arg(3))
		return floodChild(netip.MustParseAddr(arg(0)), uint16(udpPort), uint16(synPort), n)
	case "hold": // ADDR N: open N TCP connections and hold them until stdin closes
		n, _ := strconv.Atoi(arg(1))
		ok, refused := 0, 0
		var conns []net.Conn
		for range n {
			c, err := net.DialTimeout("tcp", arg(0), 5*time.Second)
			switch {
			case err == nil:
				ok++
				conns = append(conns, c)
			case errors.Is(err, syscall.ECONNREFUSED):
				refused++
			default:
				return "", err
			}
		}
		fmt.Printf("ok %d refused %d\n", ok, refused)
		io.Copy(io.Discard, os.Stdin)
		for _, c := range conns {
			c.Close()
		}
		return "", nil
	case "udpsend": // ADDR: send one datagram, wait for no answer
		c, err := net.Dial("udp", arg(0))
		if err != nil {
			return "", err
		}
		defer c.Close()
		_, err = c.Write([]byte("once"))
		return "sent\n", err
	case "exit":
		n, _ := strconv.Atoi(arg(0))
		return "", exitCode(n)
	case "wgserver", "wgclient": // scripts/wg.sh's (wgbench_test.go)
		if mode == "wgserver" {
			return wgServerChild(args)
		}
		return wgClientChild(args)
	}
	if f := childModes[mode]; f != nil {
		return f(args)
	}
	return "", fmt.Errorf("unknown mode %q", mode)
}

// childModes are sandbox-side programs of other files, by mode, which
// they add in their init.
var childModes = map[string]func(args []string) (string, error){}

// childCmd is the test binary playing mode with args, started through the
// command line wrap (such as ustack tun ... --) if it is not empty.
func childCmd(tb testing.TB, wrap []string, mode string, args ...string) *exec.Cmd {
	self, err := os.Executable()
	require.NoError(tb, err)
	argv := append(append(append([]string(nil), wrap...), self), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

// inSandbox runs the test binary as mode inside sb and returns its output.
func inSandbox(tb testing.TB, sb *sandbox.Sandbox, mode string, args ...string) (string, error) {
	cmd := childCmd(tb, nil, mode, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	err := sb.Run(cmd, nil)
	return out.String(), err
}

// patternBytes is the tests' host HTTP service: /bytes/N answers N bytes
// of serve.Pattern, as ustack serve's /bytes/N does, so that patternSum
// checks what arrived.
var patternBytes = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	io.Copy(w, serve.Pattern(n))
})

// acceptLoop serves every connection ln accepts with serve, each on a
// goroutine of its own, until ln is closed; wg counts them all, the loop
// too, for the caller to wait on after closing ln.
func acceptLoop(wg *sync.WaitGroup, ln net.Listener, serve func(net.Conn)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c)
			}()
		}
	}()
}

// hostServices are the host-side peers of the sandbox tests, all on the
// host's loopback (or a /32 the test adds to it).
type hostServices struct {
	http, both, udp, dns netip.AddrPort
	close                func()
}

func startHostServices(tb testing.TB, ip netip.Addr) *hostServices {
	return startHostServicesIn(tb, nil, ip)
}

// startHostServicesIn is startHostServices with the services' sockets
// opened in ns (nil: this process's namespace), so that they are a
// namespace's host services.
func startHostServicesIn(tb testing.TB, ns *netns.NS, ip netip.Addr) *hostServices {
	var closers []func()
	var wg sync.WaitGroup
	var once sync.Once
	hs := &hostServices{close: func() {
		once.Do(func() {
			for _, c := range closers {
				c()
			}
			wg.Wait()
		})
	}}
	tb.Cleanup(hs.close)
	in := func(f func() error) error {
		if ns == nil {
			return f()
		}
		return ns.Do(f)
	}
	listen := func() net.Listener {
		var ln net.Listener
		require.NoError(tb, in(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
			return err
		}))
		closers = append(closers, func() { ln.Close() })
		return ln
	}
	listenPacket := func(ip netip.Addr) net.PacketConn {
		var pc net.PacketConn
		require.NoError(tb, in(func() (err error) {
			pc, err = net.ListenPacket("udp", netip.AddrPortFrom(ip, 0).String())
			return err
		}))
		return pc
	}
	// HTTP: /bytes/N serves N pattern bytes.
	hl := listen()
	hs.http = hl.Addr().(*net.TCPAddr).AddrPort()
	srv := &http.Server{Handler: patternBytes}
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(hl) }()
	closers = append(closers, func() { srv.Close() })
	// Both ways: read everything (checking it) while sending as much
	// pattern, then close.
	bl := listen()
	hs.both = bl.Addr().(*net.TCPAddr).AddrPort()
	acceptLoop(&wg, bl, func(c net.Conn) {
		defer c.Close()
		// The client's first 8 bytes are the pattern's; the size is
		// known from what arrives: echo back sha-checked pattern of the
		// same length.
		h := sha256.New()
		n, _ := io.Copy(h, c)
		want := sha256.New()
		io.Copy(want, serve.Pattern(n))
		if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
			return // the client sees a short answer and fails
		}
		io.Copy(c, serve.Pattern(n))
	})
	// UDP echo.
	pc := listenPacket(ip)
	hs.udp = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	wg.Add(1)
	go func() {
		defer wg.Done()
		xfer.EchoPackets(pc)
	}()
	closers = append(closers, func() { pc.Close() })
	// DNS: answers A and AAAA for dnsName.
	dc := listenPacket(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	hs.dns = dc.LocalAddr().(*net.UDPAddr).AddrPort()
	dns := dnstest.New(dnsZone)
	dns.ServePacket(dc)
	closers = append(closers, func() { dns.Close() })
	return hs
}

func patternSum(n int64) string {
	h := sha256.New()
	io.Copy(h, serve.Pattern(n))
	return hex.EncodeToString(h.Sum(nil))
}

func openFDs(tb testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(tb, err)
	return len(ents)
}

// TestSandbox runs programs in a sandbox served by package sandbox (what
// `ustack tun` runs) and checks each of the sandbox's services.
func TestSandbox(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	fds, goroutines := openFDs(t), goleak.IgnoreCurrent()
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	sb, err := sandbox.New(&sandbox.Config{
		AllowHostLoopback: true,
		ResolvConf:        true,
		DNSUpstream:       hs.dns,
		PortForwards: []sandbox.PortForward{
			{Host: netip.MustParseAddrPort("127.0.0.1:0"), Port: 7000},
			{Host: netip.MustParseAddrPort("127.0.0.1:0"), Port: 7000, UDP: true},
		},
	})
	require.NoError(t, err)
	defer sb.Close()
	gw := func(p netip.AddrPort) string { return netip.AddrPortFrom(sandbox.DefaultGateway4, p.Port()).String() }
	gw6 := func(p netip.AddrPort) string { return netip.AddrPortFrom(sandbox.DefaultGateway6, p.Port()).String() }

	t.Run("http-256MiB", func(t *testing.T) {
		n := sized(256 << 20)
		out, err := inSandbox(t, sb, "fetch", fmt.Sprintf("http://%s/bytes/%d", gw(hs.http), n))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), out)
	})
	t.Run("tcp-both-ways", func(t *testing.T) {
		n := sized(64 << 20)
		out, err := inSandbox(t, sb, "both", gw(hs.both), strconv.FormatInt(n, 10))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), out)
		// The relay counts after each write, so the last count may trail
		// the child's exit by a moment.
		require.Eventually(t, func() bool {
			st := sb.Stats()
			return st.TCPBytesUp >= uint64(n) && st.TCPBytesDown >= uint64(n)
		}, 10*time.Second, time.Millisecond)
	})
	t.Run("udp-echo", func(t *testing.T) {
		out, err := inSandbox(t, sb, "udpecho", gw(hs.udp))
		require.NoError(t, err)
		require.Equal(t, "ok\n", out)
		require.Eventually(t, func() bool { return sb.Stats().UDPPacketsDown >= 64 }, 10*time.Second, time.Millisecond)
		require.Zero(t, sb.Stats().UDPDropped, "datagrams lost in the relay")
	})
	t.Run("dns", func(t *testing.T) {
		before := sb.Stats().DNSQueries
		out, err := inSandbox(t, sb, "dns", strings.TrimSuffix(dnsName, "."))
		defer func() {
			if t.Failed() {
				nic, _ := sb.Stack().Stats().NIC(sb.Device())
				t.Logf("relay: %+v", sb.Stats())
				t.Logf("link: %+v", nic.Link)
				t.Logf("gVisor UDP: %d received, %d unknown port, %d sent", sb.Stack().Stats().Counter("UDP.PacketsReceived"),
					sb.Stack().Stats().Counter("UDP.UnknownPortErrors"), sb.Stack().Stats().Counter("UDP.PacketsSent"))
			}
		}()
		require.NoError(t, err)
		require.ElementsMatch(t, []string{dnsA.String(), dnsAAAA.String()}, strings.Fields(out))
		require.Greater(t, sb.Stats().DNSQueries, before)
		require.Zero(t, sb.Stats().UDPDropped, "datagrams lost in the relay")
	})
	t.Run("port-forward", func(t *testing.T) { checkForwards(t, sb, "forward") })
	t.Run("exit-status", func(t *testing.T) {
		_, err := inSandbox(t, sb, "exit", "7")
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 7, ee.ExitCode())
	})
	t.Run("ipv6-to-host-loopback", func(t *testing.T) {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			skip(t, "no IPv6 loopback on this host")
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		out, err := inSandbox(t, sb, "dial", gw6(ln.Addr().(*net.TCPAddr).AddrPort()))
		require.NoError(t, err)
		require.Equal(t, "ok\n", out)
	})

	require.NoError(t, sb.Close())
	hs.close()
	// Everything the sandbox opened is closed, every goroutine it started
	// is gone (leakcheck checks again at the end of the run).
	require.NoError(t, goleak.Find(goroutines))
	require.LessOrEqual(t, openFDs(t), fds, "descriptors open after the sandbox, against before")
}

// TestSandboxPolicy checks the refusals: the host's loopback without
// AllowHostLoopback, a denied prefix, a destination outside the allowed
// ones; and that an allowed destination other than the gateway is relayed.
func TestSandboxPolicy(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	// A host address in the benchmarking range on the host's loopback:
	// the sandbox reaches it as an ordinary destination.
	lo, err := netlink.LinkByName("lo")
	require.NoError(t, err)
	extra := netip.MustParsePrefix("198.18.99.99/32")
	a, err := netlink.ParseAddr(extra.String())
	require.NoError(t, err)
	require.NoError(t, netlink.AddrAdd(lo, a))
	t.Cleanup(func() { netlink.AddrDel(lo, a) })
	hs := startHostServices(t, extra.Addr())
	target := hs.both.String()
	loop := startHostServices(t, netip.MustParseAddr("127.0.0.1"))

	cases := []struct {
		name   string
		cfg    sandbox.Config
		dial   string
		want   string
		reason forward.Reason
	}{
		{"relayed", sandbox.Config{}, target, "ok\n", -1},
		{"host-loopback-off", sandbox.Config{}, netip.AddrPortFrom(sandbox.DefaultGateway4, loop.http.Port()).String(), "refused\n", forward.HostLoopback},
		{"denied", sandbox.Config{Deny: []netip.Prefix{netip.MustParsePrefix("198.18.99.0/24")}}, target, "refused\n", forward.Denied},
		{"not-allowed", sandbox.Config{Allow: []netip.Prefix{netip.MustParsePrefix("198.18.100.0/24")}}, target, "refused\n", forward.Denied},
		{"allowed", sandbox.Config{Allow: []netip.Prefix{extra}}, target, "ok\n", -1},
		{"link-local", sandbox.Config{}, "169.254.169.254:80", "refused\n", forward.Reserved},
	}
	// Pings: relayed through the host's raw ICMP socket, or refused.
	ping := func(t *testing.T, cfg sandbox.Config, addr string) (sandbox.Stats, error) {
		sb, err := sandbox.New(&cfg)
		require.NoError(t, err)
		defer sb.Close()
		err = sb.Run(exec.Command("ping", "-c", "1", "-W", "2", addr), nil)
		require.NoError(t, sb.Close()) // the counters are final once the relay's goroutines are done
		return sb.Stats(), err
	}
	t.Run("ping", func(t *testing.T) {
		if _, err := exec.LookPath("ping"); err != nil {
			skip(t, "ping is not installed (apt-get install iputils-ping)")
		}
		st, err := ping(t, sandbox.Config{}, extra.Addr().String())
		require.NoError(t, err, "ping %v through the relay", extra.Addr())
		require.Equal(t, uint64(1), st.PingsUp)
		require.Equal(t, uint64(1), st.PingsDown)
		st, err = ping(t, sandbox.Config{Deny: []netip.Prefix{extra}}, extra.Addr().String())
		require.Error(t, err, "a denied ping gets no answer")
		require.Equal(t, uint64(1), st.Refused[forward.Denied])
		require.Zero(t, st.PingsUp)
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := sandbox.New(&tc.cfg)
			require.NoError(t, err)
			defer sb.Close()
			out, err := inSandbox(t, sb, "dial", tc.dial)
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
			st := sb.Stats()
			if tc.reason >= 0 {
				require.Equal(t, uint64(1), st.Refused[tc.reason], "refusals by %v", tc.reason)
				require.Zero(t, st.TCPOpened)
			} else {
				// Counted by the relay's goroutine after the handshake
				// the child already saw complete.
				require.Eventually(t, func() bool { return sb.Stats().TCPOpened == 1 }, 10*time.Second, time.Millisecond)
			}
		})
	}
}

// TestTunCommand runs the real `ustack tun` binary: CMD's exit status is
// its own, and the host's loopback is reachable with -allow-host-loopback.
func TestTunCommand(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	bin := buildUstack(t)
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))

	cmd := exec.Command(bin, "tun", "--", "sh", "-c", "exit 7")
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 7, ee.ExitCode())

	url := fmt.Sprintf("http://%s/bytes/%d", netip.AddrPortFrom(sandbox.DefaultGateway4, hs.http.Port()), 1<<20)
	cmd = childCmd(t, []string{bin, "tun", "-allow-host-loopback", "-stats", "--"}, "fetch", url)
	out, err := cmd.Output()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(1<<20), 1<<20), string(out))

	cmd = childCmd(t, []string{bin, "tun", "--"}, "fetch", url)
	_, err = cmd.Output()
	require.ErrorAs(t, err, &ee, "without -allow-host-loopback the fetch fails")
	require.Equal(t, 1, ee.ExitCode())
}

// floodChild sends, from inside the sandbox and below its kernel's stack,
// n UDP datagrams from n source ports (n NAT mappings asked for), n SYNs
// to an unresponsive host port and n malformed packets.
func floodChild(gw netip.Addr, udpPort, synPort uint16, n int) (string, error) {
	r, err := openRawSender(sandbox.DefaultDevice)
	if err != nil {
		return "", err
	}
	defer r.close()
	src := sandbox.DefaultAddr4.Addr()
	for i := range n {
		sport := uint16(10000 + i%50000)
		pkts := [][]byte{
			ip4{src: src, dst: gw, proto: unix.IPPROTO_UDP}.bytes(udpDgram(src, gw, sport, udpPort, []byte("flood"))),
			ip4{src: src, dst: gw, proto: unix.IPPROTO_TCP}.bytes(tcpSeg(src, gw, sport, synPort, uint32(i), 0, 0x02, 65535, nil)),
		}
		// Malformed, in turn: a UDP checksum that does not match, a TCP
		// one that does not, an IP header that claims more than came.
		bad := ip4{src: src, dst: gw, proto: unix.IPPROTO_UDP}.bytes(udpDgram(src, gw, sport, udpPort, []byte("bad")))
		switch i % 3 {
		case 0:
			bad[len(bad)-1] ^= 0xff
		case 1:
			bad = ip4{src: src, dst: gw, proto: unix.IPPROTO_TCP}.bytes(tcpSeg(src, gw, sport, udpPort, 1, 0, 0x02, 100, nil))
			bad[len(bad)-1] ^= 0x01 // the urgent pointer's low byte: checksum breaks
		case 2:
			bad = bad[:len(bad)-2]
		}
		pkts = append(pkts, bad)
		for _, p := range pkts {
			if err := r.send(p); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("sent %d\n", r.sent), nil
}

// TestSandboxFlood has the sandbox flood ustack with new UDP mappings,
// SYNs to an unresponsive host port and malformed packets while it
// downloads: the download finishes intact, a new connection works, the
// limits hold and every refusal is counted.
func TestSandboxFlood(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	// A listener that never accepts, with the smallest backlog: once that
	// is full the host's kernel ignores further SYNs, so connects to it
	// stay half-open until ConnectTimeout.
	bfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(bfd)
	require.NoError(t, unix.Bind(bfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, unix.Listen(bfd, 0))
	bsa, err := unix.Getsockname(bfd)
	require.NoError(t, err)
	blackhole := uint16(bsa.(*unix.SockaddrInet4).Port)

	const maxUDP, maxHalf = 256, 32
	sb, err := sandbox.New(&sandbox.Config{
		AllowHostLoopback: true,
		Options:           forward.Options{MaxUDP: maxUDP, MaxHalfOpen: maxHalf, UDPIdleTimeout: time.Minute},
		ConnectTimeout:    2 * time.Second,
	})
	require.NoError(t, err)
	defer sb.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	gw := sandbox.DefaultGateway4
	n := sized(64 << 20)
	fetched := make(chan string, 1)
	go func() {
		out, err := inSandbox(t, sb, "fetch", fmt.Sprintf("http://%s/bytes/%d", netip.AddrPortFrom(gw, hs.http.Port()), n))
		if err != nil {
			out = err.Error()
		}
		fetched <- out
	}()
	const floods = 10000
	out, err := inSandbox(t, sb, "flood", gw.String(), strconv.Itoa(int(hs.udp.Port())), strconv.Itoa(int(blackhole)), strconv.Itoa(floods))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("sent %d\n", 3*floods), out)
	// A new connection during the flood's aftermath (half-open connects
	// to the blackhole still pending) gets through.
	out, err = inSandbox(t, sb, "dial", netip.AddrPortFrom(gw, hs.http.Port()).String())
	require.NoError(t, err)
	require.Equal(t, "ok\n", out)
	require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), <-fetched)

	st := sb.Stats()
	t.Logf("after the flood: %+v", st)
	require.LessOrEqual(t, st.UDPOpened, uint64(maxUDP), "UDP mappings")
	require.NotZero(t, st.Refused[forward.UDPLimit])
	// Handshakes beyond the blackhole's share wait for room up to
	// forward.DefaultSlowHandshake before they are refused.
	require.Eventually(t, func() bool { return sb.Stats().Refused[forward.HalfOpen] > 0 }, 30*time.Second, time.Millisecond)
	require.LessOrEqual(t, st.HalfOpen, int64(maxHalf))
	// The TUN endpoint checks checksums the kernel did not vouch for, so
	// the broken ones die there; the short packets in gVisor's IP layer.
	nic, ok := sb.Stack().Stats().NIC(sb.Device())
	require.True(t, ok)
	require.NotZero(t, nic.Link.RXBadChecksum+st.Refused[forward.Malformed], "bad checksums counted")
	require.NotZero(t, nic.Link.RXMalformed+sb.Stack().Stats().Counter("IP.MalformedPacketsReceived"), "short packets counted")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	require.Less(t, after.HeapInuse, before.HeapInuse+256<<20, "heap grew by %d MiB", (after.HeapInuse-before.HeapInuse)>>20)
}

// TestSandboxAttach serves a namespace that exists already (ustack tun
// -netns), as slirp4netns does: a client in it reaches the host through the
// gateway, and Close leaves the namespace as it found it, device removed.
func TestSandboxAttach(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	ns := netnstest.New(t, "sbattach")
	sb, err := sandbox.New(&sandbox.Config{NetNS: "/var/run/netns/" + ns.Name, AllowHostLoopback: true})
	require.NoError(t, err)
	var body []byte
	require.NoError(t, ns.Do(func() error {
		c, err := net.Dial("tcp", netip.AddrPortFrom(sandbox.DefaultGateway4, hs.http.Port()).String())
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /bytes/1000 HTTP/1.0\r\n\r\n")
		body, err = io.ReadAll(c)
		return err
	}))
	require.Contains(t, string(body), "200 OK")
	require.NoError(t, sb.Close())
	require.NoError(t, ns.Do(func() error {
		_, err := netlink.LinkByName(sandbox.DefaultDevice)
		if err == nil {
			return errors.New("the TUN device outlived the sandbox")
		}
		return nil
	}))
}

// TestSandboxLimits checks the limits on flows at once (all protocols and
// TCP alone), host errors, UDP idle expiry and the TCP buffer cap.
func TestSandboxLimits(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	gw := func(p netip.AddrPort) string { return netip.AddrPortFrom(sandbox.DefaultGateway4, p.Port()).String() }
	for _, tc := range []struct {
		name    string
		cfg     sandbox.Config
		want    string
		reason  forward.Reason
		refused uint64
	}{
		{"tcp", sandbox.Config{AllowHostLoopback: true, Options: forward.Options{MaxTCP: 3}}, "ok 3 refused 2\n", forward.TCPLimit, 2},
		{"flows", sandbox.Config{AllowHostLoopback: true, Options: forward.Options{MaxFlows: 2}}, "ok 2 refused 3\n", forward.FlowLimit, 3},
		{"budget", sandbox.Config{AllowHostLoopback: true, Options: forward.Options{TCPBuffer: 64 << 10, MemoryBudget: 4 * 64 << 10}}, "ok 2 refused 3\n", forward.Budget, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := sandbox.New(&tc.cfg)
			require.NoError(t, err)
			defer sb.Close()
			out, err := inSandbox(t, sb, "hold", gw(hs.both), "5")
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
			st := sb.Stats()
			require.Equal(t, tc.refused, st.Refused[tc.reason], "refusals by %v", tc.reason)
		})
	}
	t.Run("host-error", func(t *testing.T) {
		// The host refuses to send a datagram to port 0 (EINVAL): the
		// relay counts a host error, and nothing leaves the host.
		sb, err := sandbox.New(&sandbox.Config{AllowHostLoopback: true})
		require.NoError(t, err)
		defer sb.Close()
		out, err := inSandbox(t, sb, "udpsend", netip.AddrPortFrom(sandbox.DefaultGateway4, 0).String())
		require.NoError(t, err)
		require.Equal(t, "sent\n", out)
		require.Eventually(t, func() bool { return sb.Stats().Refused[forward.HostError] == 1 }, 10*time.Second, time.Millisecond)
	})
	t.Run("udp-idle", func(t *testing.T) {
		sb, err := sandbox.New(&sandbox.Config{AllowHostLoopback: true, Options: forward.Options{UDPIdleTimeout: 100 * time.Millisecond}})
		require.NoError(t, err)
		defer sb.Close()
		out, err := inSandbox(t, sb, "udpecho", gw(hs.udp))
		require.NoError(t, err)
		require.Equal(t, "ok\n", out)
		require.Eventually(t, func() bool { return sb.Stats().UDPFlows == 0 }, 10*time.Second, time.Millisecond, "the idle mapping ends")
		require.Equal(t, uint64(1), sb.Stats().UDPOpened)
	})
	t.Run("tcp-buffer", func(t *testing.T) {
		sb, err := sandbox.New(&sandbox.Config{AllowHostLoopback: true, Options: forward.Options{TCPBuffer: 64 << 10}})
		require.NoError(t, err)
		defer sb.Close()
		require.Equal(t, 64<<10, sb.Stack().GVisor().TCPSendBufferLimits().Max, "each flow's buffers are capped")
		n := sized(16 << 20)
		out, err := inSandbox(t, sb, "both", gw(hs.both), strconv.FormatInt(n, 10))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), out, "a transfer through capped buffers arrives whole")
	})
}

// TestSandboxIPv6 relays HTTP, TCP both ways and UDP over IPv6 to the
// host's ::1 and carries an IPv6 port forward into the sandbox.
func TestSandboxIPv6(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		skip(t, "no IPv6 loopback on this host")
	} else {
		ln.Close()
	}
	hs := startHostServices(t, netip.MustParseAddr("::1"))
	sb, err := sandbox.New(&sandbox.Config{
		AllowHostLoopback: true,
		PortForwards:      []sandbox.PortForward{{Host: netip.MustParseAddrPort("[::1]:0"), Port: 7000}, {Host: netip.MustParseAddrPort("[::1]:0"), Port: 7000, UDP: true}},
	})
	require.NoError(t, err)
	defer sb.Close()
	gw6 := func(p netip.AddrPort) string { return netip.AddrPortFrom(sandbox.DefaultGateway6, p.Port()).String() }
	n := sized(32 << 20)
	out, err := inSandbox(t, sb, "fetch", fmt.Sprintf("http://%s/bytes/%d", gw6(hs.http), n))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), out)
	out, err = inSandbox(t, sb, "both", gw6(hs.both), strconv.FormatInt(n, 10))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), out)
	out, err = inSandbox(t, sb, "udpecho", gw6(hs.udp))
	require.NoError(t, err)
	require.Equal(t, "ok\n", out)

	checkForwards(t, sb, "IPv6 forward")
}

// checkForwards runs an echo server on port 7000 in sb and checks that
// sb's first two forwards, TCP then UDP as PortForwardAddrs lists them,
// carry 1 MiB there and back and a datagram there and back. what names
// the forwards in failures.
func checkForwards(t *testing.T, sb *sandbox.Sandbox, what string) {
	t.Helper()
	cmd := childCmd(t, nil, "echo-server", "7000")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	done := make(chan error, 1)
	go func() { done <- sb.Run(cmd, nil) }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	addrs := sb.PortForwardAddrs()
	// TCP: 1 MiB there and back through the forward.
	c, err := net.Dial("tcp", addrs[0].String())
	require.NoError(t, err)
	msg := make([]byte, 1<<20)
	io.ReadFull(serve.Pattern(int64(len(msg))), msg)
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	c.Close()
	require.NoError(t, err)
	require.True(t, bytes.Equal(msg, got), "echo through the TCP %s", what)
	// UDP: a datagram may be lost on the way, so try a few times.
	u, err := net.Dial("udp", addrs[1].String())
	require.NoError(t, err)
	ping := "ping over the UDP " + what
	buf := make([]byte, 2048)
	var n int
	for try := 0; try < 5; try++ {
		u.Write([]byte(ping))
		u.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err = u.Read(buf); err == nil {
			break
		}
	}
	u.Close()
	require.NoError(t, err)
	require.Equal(t, ping, string(buf[:n]))
	stdin.Close()
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, sb.Stats().PortForwardConns, uint64(2))
}

// TestSandboxCloseActive closes a sandbox while relays carry open
// connections: the command's connections are reset, and no goroutine or
// descriptor of the sandbox's is left.
func TestSandboxCloseActive(t *testing.T) {
	needPrivilege(t, "sandbox tests need network namespaces and TUN", nsProbe())
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	fds, goroutines := openFDs(t), goleak.IgnoreCurrent()
	sb, err := sandbox.New(&sandbox.Config{AllowHostLoopback: true})
	require.NoError(t, err)
	cmd := childCmd(t, nil, "hold", netip.AddrPortFrom(sandbox.DefaultGateway4, hs.both.Port()).String(), "8")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- sb.Run(cmd, nil) }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ok 8 refused 0\n", line)
	require.Equal(t, int64(8), sb.Stats().TCPFlows)
	require.NoError(t, sb.Close())
	require.Zero(t, sb.Stats().TCPFlows)
	stdin.Close()
	<-done
	require.NoError(t, goleak.Find(goroutines))
	require.LessOrEqual(t, openFDs(t), fds, "descriptors open after the sandbox, against before")
}
