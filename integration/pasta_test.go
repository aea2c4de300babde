//go:build linux

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/internal/netns"
)

// TestPastaPodman drives ustack's pasta with Podman 5's command line
// (its rootless network namespace's, 5.3 and later: --pid, the DNS and
// guest address aliases, --no-map-gw, a port), as root of the namespace
// as Podman's pasta is root of Podman's user namespace, on a host
// namespace of known addressing, against a namespace the test makes.
// Podman's line is given --dns-host too, so that DNS goes to the test's
// resolver rather than the machine's. The foreground process exits 0
// once the namespace is configured; the daemon the PID file names
// serves it until the namespace is deleted.
func TestPastaPodman(t *testing.T) {
	e := setupTools(t)
	ctr, err := netns.New("ustack-pasta")
	require.NoError(t, err)
	defer ctr.Close()
	// The host's services: a resolver at its address, HTTP there (the
	// guest address alias's target) and at an address of the wider
	// world (here one on the host's loopback).
	remote := netip.MustParseAddr("203.0.113.9")
	neighbour := netip.MustParseAddr("198.18.9.20") // on-link to the host, and so to the namespace
	require.NoError(t, e.ns.AddAddr("lo", netip.PrefixFrom(remote, 32), netip.PrefixFrom(neighbour, 32)))
	var pc net.PacketConn
	require.NoError(t, e.ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(hostAddr4.Addr(), 53).String())
		return err
	}))
	dns := dnstest.New(dnsZone)
	dns.ServePacket(pc)
	defer dns.Close()
	onHost := e.serveHTTP(t, hostAddr4.Addr())
	far := e.serveHTTP(t, remote)
	near := e.serveHTTP(t, neighbour)
	// The container's server, behind the port forward.
	var ln net.Listener
	require.NoError(t, ctr.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":80")
		return err
	}))
	srv := &http.Server{Handler: patternBytes}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(ln) }()
	defer func() { srv.Close(); wg.Wait() }()

	pidFile := filepath.Join(e.dir, "pasta.pid")
	nsPath := "/run/netns/" + ctr.Name
	c := exec.Command("nsenter", "--net=/run/netns/"+e.ns.Name, "--", filepath.Join(e.bin, "pasta"),
		"--config-net", "--pid", pidFile, "--dns-forward", "169.254.1.1", "--dns-host", hostAddr4.Addr().String(),
		"-t", "18095-18095:80-80", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet",
		"--netns", nsPath, "--map-guest-addr", "169.254.1.2")
	out, err := c.CombinedOutput() // returns only once nothing holds its output
	require.NoError(t, err, "%s", out)
	require.Empty(t, string(out), "--quiet")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	daemon, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", daemon))
	require.NoError(t, err, "the PID file's process serves")
	require.Contains(t, string(cmdline), "pasta relay")
	defer func() {
		if exited(daemon) != nil {
			syscall.Kill(daemon, syscall.SIGKILL)
		}
	}()

	t.Run("the host's addressing", func(t *testing.T) {
		addrs := runIn(t, ctr, "ip", "-o", "addr", "show", "dev", "eth0")
		require.Contains(t, addrs, "inet "+hostAddr4.String())
		require.Contains(t, addrs, "inet6 "+hostAddr6.String())
		require.Contains(t, runIn(t, ctr, "ip", "-o", "link", "show", "dev", "eth0"), "link/ether") // a TAP device, as pasta's
		require.Contains(t, runIn(t, ctr, "ip", "route", "show", "default"), "default via "+hostGW4.String()+" dev eth0")
		require.Contains(t, runIn(t, ctr, "ip", "-6", "route", "show", "default"), "default via "+hostGW6.String()+" dev eth0")
	})
	t.Run("DNS through the forward address", func(t *testing.T) {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&nsDialer{ns: ctr}).DialContext(ctx, "udp", "169.254.1.1:53")
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := r.LookupNetIP(ctx, "ip4", dnsName)
		require.NoError(t, err)
		require.Equal(t, []netip.Addr{dnsA}, got)
	})
	n := sized(16 << 20)
	fetch := func(t *testing.T, from *netns.NS, url string) string {
		cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: (&nsDialer{ns: from}).DialContext}}
		resp, err := cl.Get(url)
		require.NoError(t, err, url)
		defer resp.Body.Close()
		return sumOf(t, resp.Body)
	}
	t.Run("outbound", func(t *testing.T) {
		require.Equal(t, patternSum(n), fetch(t, ctr, fmt.Sprintf("http://%s/bytes/%d", far, n)))
	})
	t.Run("an on-link neighbour of the host's", func(t *testing.T) {
		// The namespace resolves it on eth0; ustack answers for every
		// address (the relay's stack spoofs), as pasta does.
		require.Equal(t, patternSum(n), fetch(t, ctr, fmt.Sprintf("http://%s/bytes/%d", near, n)))
	})
	t.Run("the guest address alias reaches the host", func(t *testing.T) {
		require.Equal(t, patternSum(n), fetch(t, ctr, fmt.Sprintf("http://169.254.1.2:%d/bytes/%d", onHost.Port(), n)))
	})
	t.Run("port forward", func(t *testing.T) {
		for _, host := range []string{"127.0.0.1", hostAddr4.Addr().String(), "[::1]"} {
			require.Equal(t, patternSum(n), fetch(t, e.ns, fmt.Sprintf("http://%s:18095/bytes/%d", host, n)), host)
		}
	})
	t.Run("exits once the namespace is deleted", func(t *testing.T) {
		require.NoError(t, ctr.Close()) // as `ip netns del`: unmounted and removed
		require.NoError(t, exited(daemon))
	})
}

// TestPastaRootlessKit drives ustack's pasta with RootlessKit 2.3's
// command line as the tools' user, on the PID of a process in user and
// network namespaces of the user's (RootlessKit's child): the foreground
// process exits 0 once tap0 is configured as RootlessKit asks, the
// namespace reaches a host address, and pasta exits once the process
// does.
func TestPastaRootlessKit(t *testing.T) {
	e := setupTools(t)
	onHost := e.serveHTTP(t, hostAddr4.Addr())
	pid := e.holder(t)
	c := e.cmd("pasta", "--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24",
		"--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", strconv.Itoa(pid))
	out, err := c.CombinedOutput() // as RootlessKit runs it
	require.NoError(t, err, "%s", out)
	nsenter := func(args ...string) string {
		out, err := inNetNS(pid, args...)
		require.NoError(t, err, "%q: %s", args, out)
		return string(out)
	}
	addrs := nsenter("ip", "-o", "addr", "show", "dev", "tap0")
	require.Contains(t, addrs, "inet 10.0.2.100/24")
	require.NotContains(t, addrs, "inet6 fd", "--ipv4-only")
	require.Contains(t, nsenter("ip", "route", "show", "default"), "default via 10.0.2.2 dev tap0")
	n := sized(8 << 20)
	got := nsenter("busybox", "wget", "-q", "-O", "-", fmt.Sprintf("http://%s/bytes/%d", onHost, n))
	require.Equal(t, patternSum(n), sumOf(t, strings.NewReader(got)))
	var relay int
	for _, p := range e.processes(pid) {
		if strings.Contains(p, "pasta relay") {
			relay, _ = strconv.Atoi(strings.Fields(p)[0])
		}
	}
	require.NotZero(t, relay, "a daemon serves: %q", e.processes(pid))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.NoError(t, exited(relay))
	e.requireNoneLeft(t, "once the namespace's process ended")
}

// runIn runs argv in ns as root and returns its output.
func runIn(t *testing.T, ns *netns.NS, argv ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, "--"}, argv...)...).CombinedOutput()
	require.NoError(t, err, "%q: %s", argv, out)
	return string(out)
}

// exited waits until process pid has exited (a zombie counts), within a
// bound for a hang.
func exited(pid int) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if zombie(pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still runs", pid)
		}
	}
}

// TestPastaRootlessKitForeground drives ustack's pasta with RootlessKit
// 2.0's command line: RootlessKit made tap0 (a TAP device) in its child's
// namespace beforehand, starts pasta in the foreground without
// --config-net, configures tap0 itself, and at the end kills pasta with
// SIGKILL, which must take its relay along.
func TestPastaRootlessKitForeground(t *testing.T) {
	e := setupTools(t)
	onHost := e.serveHTTP(t, hostAddr4.Addr())
	pid := e.holder(t)
	// As RootlessKit's parentutils.PrepareTap: a persistent TAP device
	// of the user's (root of the child's user namespace is the user).
	out, err := inNetNS(pid, "ip", "tuntap", "add", "dev", "tap0", "mode", "tap", "user", strconv.Itoa(e.uid))
	require.NoError(t, err, "%s", out)
	c := e.cmd("pasta", "--foreground", "--stderr", "--ns-ifname=tap0", "--mtu=65520", "--no-dhcp", "--no-ra",
		"--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only",
		"--tcp-ports=none", "--udp-ports=none", strconv.Itoa(pid))
	var stderr syncBuffer
	c.Stderr = &stderr
	require.NoError(t, c.Start())
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	// RootlessKit 2.0 does not wait for pasta: its child configures
	// tap0 at once, and the first connection waits for ustack's ARP
	// answer. Here: until the relay serves.
	var front, relay int
	require.Eventually(t, func() bool {
		for _, p := range e.processes(pid) {
			f := strings.Fields(p)
			switch {
			case strings.Contains(p, "pasta relay"):
				relay, _ = strconv.Atoi(f[0])
			case strings.Contains(p, "pasta --foreground"):
				front, _ = strconv.Atoi(f[0])
			}
		}
		return relay != 0 && front != 0
	}, 10*time.Second, 20*time.Millisecond, "%s", &stderr)
	for _, argv := range [][]string{
		{"ip", "addr", "add", "10.0.2.100/24", "dev", "tap0"},
		{"ip", "link", "set", "tap0", "mtu", "65520", "up"},
		{"ip", "route", "add", "default", "via", "10.0.2.2", "dev", "tap0"},
	} {
		out, err := inNetNS(pid, argv...)
		require.NoError(t, err, "%q: %s", argv, out)
	}
	n := sized(8 << 20)
	got, err := inNetNS(pid, "busybox", "wget", "-q", "-O", "-", fmt.Sprintf("http://%s/bytes/%d", onHost, n))
	require.NoError(t, err)
	require.Equal(t, patternSum(n), sumOf(t, strings.NewReader(string(got))))
	require.NoError(t, syscall.Kill(front, syscall.SIGKILL))
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("pasta did not end after SIGKILL")
	}
	require.NoError(t, exited(relay))
	e.requireNoneLeft(t, "after SIGKILL", pid)
	out, err = inNetNS(pid, "ip", "-o", "link", "show", "tap0")
	require.NoError(t, err, "the device is RootlessKit's, and stays: %s", out)
}
