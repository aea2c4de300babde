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
