//go:build linux

package integration

import (
	"archive/tar"
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
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/internal/netns"
)

// The drop-in tests run the rootless container tools (Podman,
// RootlessKit) and their callers' command lines against ustack's
// slirp4netns and pasta front ends, as an unprivileged user of their own
// with subordinate id ranges, inside a network namespace the test makes
// (the tools' "host"), so that every address they reach is the test's.

// toolUser runs the rootless container tools. It is not rootlessUser,
// whose tests assert that no process of theirs is left: Podman leaves a
// pause process per user, which these tests end themselves.
const toolUser = "ustack-podman"

// The tools' host namespace's addressing: hostAddr4 (on eth0, the
// interface of the default routes) is where host services listen that
// the sandboxes reach without the host's loopback; hostGW4 and hostGW6
// are the default gateways pasta copies.
var (
	hostAddr4 = netip.MustParsePrefix("198.18.9.1/24")
	hostGW4   = netip.MustParseAddr("198.18.9.254")
	hostAddr6 = netip.MustParsePrefix("fd00:9::1/64")
	hostGW6   = netip.MustParseAddr("fe80::1")
)

// toolEnv is what the drop-in tests share: the user, its directory (a
// home, a private XDG_RUNTIME_DIR, ustack under both front-end names),
// and the host namespace.
type toolEnv struct {
	uid, gid           int
	subStart, subCount int
	dir, home, run     string
	bin                string // dir/bin: ustack, and slirp4netns and pasta linking to it
	ns                 *netns.NS
}

// setupTools creates the user (with subordinate ids) if missing, its
// directory and the host namespace, all removed at the end, where no
// process of the user (or of its subordinate ids) may be left.
func setupTools(t *testing.T) *toolEnv {
	requireNamespaces(t)
	for _, tool := range []struct{ name, pkg string }{{"nsenter", "util-linux"}, {"runuser", "util-linux"}, {"newuidmap", "uidmap"}} {
		needTool(t, tool.name, tool.pkg)
	}
	u, err := user.Lookup(toolUser)
	if err != nil {
		out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", toolUser).CombinedOutput()
		require.NoError(t, err, "useradd %s: %s", toolUser, out)
		u, err = user.Lookup(toolUser)
		require.NoError(t, err)
	}
	e := &toolEnv{}
	e.uid, _ = strconv.Atoi(u.Uid)
	e.gid, _ = strconv.Atoi(u.Gid)
	e.subStart, e.subCount = subIDs(t, e.uid)
	if e.subCount == 0 {
		out, err := exec.Command("usermod", "--add-subuids", "300000-365535", "--add-subgids", "300000-365535", toolUser).CombinedOutput()
		require.NoError(t, err, "usermod: %s", out)
		e.subStart, e.subCount = subIDs(t, e.uid)
	}
	// Short: Podman's API socket for a container is
	// XDG_RUNTIME_DIR/libpod/tmp/<64 hex digits>.net, within the 107
	// bytes of a unix socket's path.
	e.dir, err = os.MkdirTemp("", "ut-")
	require.NoError(t, err)
	e.home, e.run, e.bin = filepath.Join(e.dir, "home"), filepath.Join(e.dir, "run"), filepath.Join(e.dir, "bin")
	for _, d := range []string{e.home, e.run, e.bin} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	copyExec(t, buildUstack(t), filepath.Join(e.bin, "ustack"))
	for _, name := range []string{"slirp4netns", "pasta"} {
		require.NoError(t, os.Symlink("ustack", filepath.Join(e.bin, name)))
	}
	require.NoError(t, os.Chmod(e.dir, 0o755))
	require.NoError(t, os.Chmod(e.bin, 0o755))
	require.NoError(t, filepath.Walk(e.dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, e.uid, e.gid)
	}))
	e.ns, err = netns.New("ustack-tools")
	require.NoError(t, err)
	// The host's interface: one end of a veth pair whose other end is
	// in the same namespace (the kernel here may lack dummy devices).
	require.NoError(t, e.ns.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "eth0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0peer"}); err != nil {
			return err
		}
		return errors.Join(setUpLink("eth0"), setUpLink("eth0peer"))
	}))
	require.NoError(t, e.ns.AddAddr("eth0", hostAddr4, hostAddr6))
	require.NoError(t, e.ns.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, gw := range []netip.Addr{hostGW4, hostGW6} {
			bits := 32
			if gw.Is6() {
				bits = 128
			}
			dst := &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: gw.AsSlice()}); err != nil {
				return fmt.Errorf("default route via %v: %w", gw, err)
			}
		}
		return nil
	}))
	t.Cleanup(func() {
		e.requireNothingLeft(t)
		e.ns.Close()
		os.RemoveAll(e.dir)
	})
	return e
}

// setUpLink sets the calling thread's namespace's interface name up.
func setUpLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// subIDs is the user's first subordinate uid range (its gids are
// given the same), or a zero count.
func subIDs(t *testing.T, uid int) (start, count int) {
	b, err := os.ReadFile("/etc/subuid")
	if os.IsNotExist(err) {
		return 0, 0
	}
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 3 && (f[0] == toolUser || f[0] == strconv.Itoa(uid)) {
			start, _ = strconv.Atoi(f[1])
			count, _ = strconv.Atoi(f[2])
			return start, count
		}
	}
	return 0, 0
}

// cmd is argv run as the user in the host namespace, with a clean
// environment: its home and runtime directory, and the front ends on
// PATH (as Podman finds pasta, and slirp4netns without
// network_cmd_path).
func (e *toolEnv) cmd(argv ...string) *exec.Cmd {
	full := append([]string{"--net=/run/netns/" + e.ns.Name, "--", "runuser", "-u", toolUser, "--", "env", "-i",
		"PATH=" + e.bin + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + e.home, "XDG_RUNTIME_DIR=" + e.run}, argv...)
	c := exec.Command("nsenter", full...)
	c.Dir = e.dir
	return c
}

// owned reports whether uid is the user's or one of its subordinate
// ids, which processes in its user namespaces run as (a confined relay
// as nobody there).
func (e *toolEnv) owned(uid int) bool {
	return uid == e.uid || uid >= e.subStart && uid < e.subStart+e.subCount
}

// processes lists the processes of the user and its subordinate ids
// ("PID ARGV"), but for the pids in keep.
func (e *toolEnv) processes(keep ...int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || contains(keep, pid) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+ent.Name(), &st) != nil || !e.owned(int(st.Uid)) || zombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.TrimSpace(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))))
	}
	return out
}

// zombie reports whether pid has exited and waits for its parent to
// reap it (pid 1, for an orphan, which here may take its time): it holds
// nothing any more.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// requireNoneLeft waits (a bound for a hang, not a timing) until no
// process of the user is left but keep's, and fails naming them if some
// are.
func (e *toolEnv) requireNoneLeft(t *testing.T, what string, keep ...int) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = e.processes(keep...); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	require.Empty(t, left, "%s: processes of %s left behind", what, toolUser)
}

// requireNothingLeft is the end of every drop-in test: the pause
// process Podman leaves (catatonit -P, the user namespace's holder) is
// ended, and then nothing of the user's may be left.
func (e *toolEnv) requireNothingLeft(t *testing.T) {
	for _, p := range e.processes() {
		if strings.Contains(p, "catatonit") {
			pid, _ := strconv.Atoi(strings.Fields(p)[0])
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	e.requireNoneLeft(t, "at the end")
}

// serveHTTP serves patternBytes on addr (port 0 picks one) in the host
// namespace until the test ends, and returns where.
func (e *toolEnv) serveHTTP(t *testing.T, addr netip.Addr) netip.AddrPort {
	var ln net.Listener
	require.NoError(t, e.ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	srv := &http.Server{Handler: patternBytes}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// dialer dials from the host namespace: a socket keeps the namespace it
// was made in.
func (e *toolEnv) dialer() *nsDialer { return &nsDialer{ns: e.ns} }

// busyboxApplets are the commands of the test image: busybox-static's
// applets the tests' containers run.
var busyboxApplets = []string{"sh", "wget", "cat", "echo", "ip", "sleep", "sha256sum", "httpd", "grep", "head", "wc", "true", "nslookup", "nc", "seq", "mkdir", "dd", "test", "["}

// busyboxImage writes a tar of a root filesystem with /bin/busybox from
// busybox-static and its applets as symlinks, which `podman import`
// makes an image of, offline.
func busyboxImage(t *testing.T, path string) {
	needTool(t, "busybox", "busybox-static")
	bb, err := exec.LookPath("busybox")
	require.NoError(t, err)
	body, err := os.ReadFile(bb)
	require.NoError(t, err)
	out, err := exec.Command("file", "-L", bb).Output()
	if err == nil && !bytes.Contains(out, []byte("statically linked")) && !bytes.Contains(out, []byte("static-pie")) {
		skip(t, "%s is not statically linked (apt-get install busybox-static)", bb)
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := tar.NewWriter(f)
	for _, d := range []string{"bin/", "etc/", "tmp/", "proc/", "sys/", "dev/", "www/"} {
		require.NoError(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}))
	}
	require.NoError(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(body))}))
	_, err = w.Write(body)
	require.NoError(t, err)
	for _, a := range busyboxApplets {
		require.NoError(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}))
	}
	require.NoError(t, w.Close())
}

// sumOf is the hex sha256 of what r reads, as sha256sum prints it.
func sumOf(t *testing.T, r io.Reader) string {
	t.Helper()
	h := sha256.New()
	_, err := io.Copy(h, r)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// nsDialer dials from a namespace: the socket is made on a thread in
// it, and keeps it.
type nsDialer struct{ ns *netns.NS }

// Dial dials from the namespace, within 10 s: x/net/proxy's SOCKS5
// client takes a Dial.
func (d *nsDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

// DialContext dials from the namespace.
func (d *nsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := d.ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// holder starts, as the tools' user, a process in user and network
// namespaces of its own (`unshare -rn`, as RootlessKit's child), and
// returns its PID once it runs in them; it is killed at the end.
func (e *toolEnv) holder(t *testing.T) int {
	t.Helper()
	needTool(t, "unshare", "util-linux")
	c := e.cmd("unshare", "-rn", "sleep", "600")
	require.NoError(t, c.Start())
	// runuser runs unshare as its child, which becomes sleep once the
	// namespaces exist.
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 {
		for _, p := range e.processes() {
			if f := strings.Fields(p); len(f) > 1 && f[1] == "sleep" {
				pid, _ = strconv.Atoi(f[0])
			}
		}
		require.True(t, pid != 0 || time.Now().Before(deadline), "the holder never ran")
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		c.Wait()
	})
	return pid
}

// inNetNS runs argv as root in process pid's network namespace.
func inNetNS(pid int, argv ...string) ([]byte, error) {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "--"}, argv...)...).CombinedOutput()
}

// TestFrontEndLifecycle: ustack's slirp4netns, rootless and confined
// (a supervisor, the namespace helper, the relay), leaves no process and
// no device behind when its supervisor gets SIGTERM, or SIGKILL as
// RootlessKit sends it; a device of the other type is refused as what
// it is.
func TestFrontEndLifecycle(t *testing.T) {
	e := setupTools(t)
	pid := e.holder(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			ready, readyW, err := os.Pipe()
			require.NoError(t, err)
			defer ready.Close()
			c := e.cmd("slirp4netns", "-c", "--enable-sandbox", "--enable-seccomp", "-r", "3", strconv.Itoa(pid), "tap0")
			c.ExtraFiles = []*os.File{readyW}
			var stderr syncBuffer
			c.Stderr = &stderr
			require.NoError(t, c.Start())
			readyW.Close()
			waited := make(chan error, 1)
			go func() { waited <- c.Wait() }()
			b := make([]byte, 1)
			_, err = ready.Read(b)
			require.NoError(t, err, "no ready byte: %s", stderr.String())
			out, err := inNetNS(pid, "ip", "-o", "link", "show", "tap0")
			require.NoError(t, err, "%s", out)
			procs := strings.Join(e.processes(pid), "\n")
			require.Contains(t, procs, "slirp4netns relay")
			require.Contains(t, procs, "ustack-sandbox-helper")
			// nsenter runs runuser, which runs the front end as its
			// child: signal that one.
			var front int
			for _, p := range e.processes(pid) {
				if strings.Contains(p, "slirp4netns -c") {
					front, _ = strconv.Atoi(strings.Fields(p)[0])
				}
			}
			require.NotZero(t, front, "%s", procs)
			require.NoError(t, syscall.Kill(front, sig))
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				t.Fatalf("runuser did not end after the front end's %v", sig)
			}
			e.requireNoneLeft(t, "after "+sig.String(), pid)
			out, err = inNetNS(pid, "ip", "-o", "link")
			require.NoError(t, err)
			require.NotContains(t, string(out), "tap0", "the device went with the relay")
		})
	}
	t.Run("pasta's daemon, terminated", func(t *testing.T) {
		pidFile := filepath.Join(e.run, "pasta.pid")
		out, err := e.cmd("pasta", "--config-net", "-I", "tap0", "-a", "10.0.2.100", "-n", "24", "-g", "10.0.2.2", "--ipv4-only",
			"-t", "none", "-u", "none", "-T", "none", "-U", "none", "-P", pidFile, strconv.Itoa(pid)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		b, err := os.ReadFile(pidFile)
		require.NoError(t, err)
		daemon, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		out, err = inNetNS(pid, "ip", "-o", "link", "show", "tap0")
		require.NoError(t, err, "%s", out)
		require.NoError(t, syscall.Kill(daemon, syscall.SIGTERM))
		require.NoError(t, exited(daemon))
		e.requireNoneLeft(t, "after SIGTERM", pid)
		out, err = inNetNS(pid, "ip", "-o", "link")
		require.NoError(t, err)
		require.NotContains(t, string(out), "tap0", "the device went with the daemon")
	})
	t.Run("a device of the other type", func(t *testing.T) {
		out, err := inNetNS(pid, "ip", "tuntap", "add", "dev", "tap0", "mode", "tun")
		require.NoError(t, err, "%s", out)
		defer inNetNS(pid, "ip", "tuntap", "del", "dev", "tap0", "mode", "tun")
		c := e.cmd("slirp4netns", "-c", strconv.Itoa(pid), "tap0")
		out, err = c.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out)
		require.Equal(t, 1, exit.ExitCode())
		require.Contains(t, string(out), "tap0 is a TUN device, not TAP")
		require.NotContains(t, string(out), "CAP_NET_ADMIN")
	})
}

// TestTapSandbox runs ustack tun on TAP devices, as root in a namespace
// of the test's: the sandbox takes an IPv6 address from ustack's router
// advertisements (SLAAC, not dadfailed) and relays UDP, DNS and pings
// (written raw by the relay, framed by the sandbox); it attaches to a
// persistent TAP device its creator configured and changes nothing of
// it; and it captures the sandbox's traffic in a file tcpdump reads.
func TestTapSandbox(t *testing.T) {
	requireNamespaces(t)
	needTool(t, "tcpdump", "tcpdump")
	bin := buildUstack(t)
	host, err := netns.New("ustack-tap")
	require.NoError(t, err)
	defer host.Close()
	in := func(argv ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=/run/netns/" + host.Name, "--"}, argv...)...)
	}
	var pc net.PacketConn
	require.NoError(t, host.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		return err
	}))
	dns := dnstest.New(dnsZone)
	dns.ServePacket(pc)
	defer dns.Close()
	upstream := pc.LocalAddr().String()

	t.Run("SLAAC, DNS, pings", func(t *testing.T) {
		pcapFile := filepath.Join(t.TempDir(), "tap.pcap")
		script := `for i in $(seq 100); do ip -6 addr show dev tap0 | grep -q 'fd00:198:18:.* dynamic' && ! ip -6 addr show dev tap0 | grep -q tentative && break; sleep 0.1; done
ip -6 addr show dev tap0
busybox nslookup ` + strings.TrimSuffix(dnsName, ".") + ` 198.18.0.3
ping -c 1 -W 5 198.18.0.1`
		out, err := in(bin, "tun", "-tap", "-pcap", pcapFile, "-dns-upstream", upstream, "--", "sh", "-c", script).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Regexp(t, `inet6 fd00:198:18:[0-9a-f:]+/64 scope global dynamic`, string(out))
		require.NotContains(t, string(out), "dadfailed")
		require.Contains(t, string(out), dnsA.String())
		require.Contains(t, string(out), "1 received")
		// The capture: the solicitation and ustack's advertisement, the
		// DNS query and its relayed answer, the echo and its reply.
		for _, f := range []struct {
			filter string
			min    int
		}{
			{"icmp6 and ip6[40] == 133", 1},
			{"icmp6 and ip6[40] == 134", 1},
			{"udp port 53", 2},
			{"icmp", 2},
			{"arp", 2},
		} {
			out, err := exec.Command("tcpdump", "-nr", pcapFile, f.filter).Output()
			require.NoError(t, err, f.filter)
			lines := strings.Count(string(out), "\n")
			require.GreaterOrEqual(t, lines, f.min, "tcpdump -r %s %q:\n%s", pcapFile, f.filter, out)
		}
	})
	t.Run("attached to a persistent device, unconfigured", func(t *testing.T) {
		for _, argv := range [][]string{
			{"ip", "tuntap", "add", "dev", "tap7", "mode", "tap"},
			{"ip", "addr", "add", "198.18.0.100/24", "dev", "tap7"},
			{"ip", "link", "set", "tap7", "mtu", "9000", "up"},
		} {
			out, err := in(argv...).CombinedOutput()
			require.NoError(t, err, "%q: %s", argv, out)
		}
		defer in("ip", "tuntap", "del", "dev", "tap7", "mode", "tap").Run()
		// IPv4: the kernel adds IPv6 addresses of its own from ustack's
		// router advertisements.
		before, err := in("ip", "-4", "-o", "addr", "show", "dev", "tap7").Output()
		require.NoError(t, err)
		srv := (&toolEnv{ns: host}).serveHTTP(t, netip.MustParseAddr("127.0.0.1"))
		ready, readyW, err := os.Pipe()
		require.NoError(t, err)
		defer ready.Close()
		c := in(bin, "tun", "-tap", "-no-configure", "-device", "tap7", "-mtu", "9000", "-netns", "/run/netns/"+host.Name, "-allow-host-loopback", "-ready-fd", "3")
		c.ExtraFiles = []*os.File{readyW}
		c.Stderr = os.Stderr
		require.NoError(t, c.Start())
		readyW.Close()
		defer func() {
			c.Process.Signal(syscall.SIGTERM)
			c.Wait()
		}()
		_, err = ready.Read(make([]byte, 1))
		require.NoError(t, err)
		after, err := in("ip", "-4", "-o", "addr", "show", "dev", "tap7").Output()
		require.NoError(t, err)
		require.Equal(t, string(before), string(after), "the device's addresses are its creator's")
		link, err := in("ip", "-o", "link", "show", "dev", "tap7").Output()
		require.NoError(t, err)
		require.Contains(t, string(link), "mtu 9000")
		// The creator routes through ustack's gateway; the host's
		// loopback is behind it.
		out, err := in("ip", "route", "add", "default", "via", "198.18.0.1", "dev", "tap7").CombinedOutput()
		require.NoError(t, err, "%s", out)
		n := sized(8 << 20)
		got, err := in("busybox", "wget", "-q", "-O", "-", fmt.Sprintf("http://198.18.0.1:%d/bytes/%d", srv.Port(), n)).Output()
		require.NoError(t, err)
		require.Equal(t, patternSum(n), sumOf(t, bytes.NewReader(got)))
	})
}
