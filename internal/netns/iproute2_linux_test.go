package netns

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/testenv"
)

// privateRunEnv marks this test binary re-executed by inPrivateRun; its
// value names the parent's mount namespace, which the child must not be
// in before it mounts over /run.
const privateRunEnv = "USTACK_TEST_NETNS_PRIVATE_RUN"

// childTimeout bounds a re-executed test: each takes well under a second
// alone and a few on a loaded 2-core machine; the bound only turns a hang
// into a failure.
const childTimeout = 2 * time.Minute

// waitTimeout bounds every channel wait in these tests, for the same
// reason.
const waitTimeout = time.Minute

// theirs is the namespace `ip netns add` makes in these tests, inside the
// child's own /run.
const theirs = "ustack-test-iproute2"

// inPrivateRun runs the calling test again in a child process: this test
// binary, in a mount namespace of its own with an empty tmpfs on /run. So
// /run/netns starts out as a plain directory, as on a freshly booted
// machine where the first `ip netns add` makes it a mount point, and
// nothing the test mounts is seen by the host or by other tests. It
// returns true in the child, where the caller runs the test's body, and
// false in the parent once the child has passed (it fails or skips t
// otherwise).
func inPrivateRun(t *testing.T) bool {
	t.Helper()
	if parent := os.Getenv(privateRunEnv); parent != "" {
		self, err := os.Readlink("/proc/self/ns/mnt")
		require.NoError(t, err)
		require.NotEqual(t, parent, self, "the child is in its parent's mount namespace: it must not mount over the host's /run")
		require.NoError(t, unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"))
		run, err := os.Stat("/run")
		require.NoError(t, err)
		varRun, err := os.Stat("/var/run")
		require.NoError(t, err)
		require.True(t, os.SameFile(run, varRun), "/var/run is not /run: `ip netns` (/var/run/netns) and this package (%s) would use different directories", runDir)
		return true
	}
	requirePrivilege(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Skip(t, "ip is not installed (apt-get install iproute2)")
	}
	self, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), privateRunEnv+"="+self)
	// Go's runtime also makes every mount of the new namespace private,
	// so that the tmpfs on /run cannot propagate to the host's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the test in a mount namespace of its own:\n%s", out)
	require.Contains(t, string(out), "--- PASS: "+t.Name(), "the test in a mount namespace of its own did not pass:\n%s", out)
	t.Logf("in a mount namespace of its own:\n%s", out)
	return false
}

// ip runs ip(8) with args and returns its output, failing t if it fails.
func ip(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// requireSharedRunDir checks that runDir is a mount point of its own with
// shared propagation, as `ip netns add` leaves it.
func requireSharedRunDir(t *testing.T) {
	t.Helper()
	// The mount runDir is on, by ID: mountinfo also lists mounts that
	// others cover (the host's runDir, under the child's tmpfs).
	var stx unix.Statx_t
	require.NoError(t, unix.Statx(unix.AT_FDCWD, runDir, 0, unix.STATX_MNT_ID, &stx))
	require.NotZero(t, stx.Mask&unix.STATX_MNT_ID, "statx reports no mount ID")
	id := strconv.FormatUint(stx.Mnt_id, 10)
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// proc(5): ID, parent ID, major:minor, root, mount point, options,
		// optional fields up to "-".
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || fields[0] != id {
			continue
		}
		require.Equal(t, runDir, fields[4], "%s is no mount point: it is on %s", runDir, sc.Text())
		end := slices.Index(fields, "-")
		require.GreaterOrEqual(t, end, 6, "a mountinfo line without its separator: %s", sc.Text())
		require.True(t, slices.ContainsFunc(fields[6:end], func(o string) bool { return strings.HasPrefix(o, "shared:") }),
			"%s is a mount point without shared propagation: %s", runDir, sc.Text())
		return
	}
	require.NoError(t, sc.Err())
	t.Fatalf("mount %s of %s is not in /proc/self/mountinfo", id, runDir)
}

// requireNamed checks that ns's name still leads to ns, for this package
// and for `ip netns`, and that ns is usable.
func requireNamed(t *testing.T, ns *NS) {
	t.Helper()
	var byName, held unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(runDir, ns.Name), &byName))
	require.NoError(t, unix.Fstat(int(ns.handle), &held))
	require.Equal(t, [2]uint64{held.Dev, held.Ino}, [2]uint64{byName.Dev, byName.Ino}, "%s/%s is not the namespace New made", runDir, ns.Name)
	require.Contains(t, ip(t, "-n", ns.Name, "link", "show", "lo"), "LOOPBACK,UP", "ip -n %s", ns.Name)
	require.NoError(t, ns.Do(func() error { return setUp("lo") }))
}

// requireDeleted closes ns, which must succeed, and checks that its name
// is gone, for this package and for `ip netns`.
func requireDeleted(t *testing.T, ns *NS) {
	t.Helper()
	require.NoError(t, ns.Close())
	_, err := os.Stat(filepath.Join(runDir, ns.Name))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotContains(t, ip(t, "netns", "list"), ns.Name)
}

// TestIproute2LeavesOursAlone: `ip netns add` of another name, the first
// anyone makes after ours in a /run/netns that was no mount point, and
// `ip netns del` of it leave our namespace named, usable and deletable.
// Were /run/netns made a mount point by that `ip netns add`, its bind
// mount would hide ours and Close would fail.
func TestIproute2LeavesOursAlone(t *testing.T) {
	if !inPrivateRun(t) {
		return
	}
	ours := newNS(t, "ustack-test-ours")
	ip(t, "netns", "add", theirs)
	ip(t, "netns", "del", theirs)
	requireNamed(t, ours)
	requireDeleted(t, ours)
	requireSharedRunDir(t)
}

// TestIproute2WhileOursInUse: the same while one namespace of ours is in
// use, a thread inside it and a listening socket in it, and another of
// ours is made beside it: both stay named, usable and deletable, and the
// socket keeps taking connections.
func TestIproute2WhileOursInUse(t *testing.T) {
	if !inPrivateRun(t) {
		return
	}
	busy := newNS(t, "ustack-test-busy")
	var ln net.Listener
	require.NoError(t, busy.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	defer ln.Close()
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // on a failure, so that the goroutine ends
	go func() {
		done <- busy.Do(func() error {
			close(entered)
			<-release
			return nil
		})
	}()
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("no thread entered the namespace")
	}

	other := newNS(t, "ustack-test-other")
	ip(t, "netns", "add", theirs)
	ip(t, "netns", "del", theirs)

	releaseOnce()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("the thread inside the namespace did not return")
	}
	require.NoError(t, busy.Do(func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}))
	// The connection waits in the listen queue: Accept does not block.
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(waitTimeout)))
	c, err := ln.Accept()
	require.NoError(t, err)
	c.Close()
	for _, ns := range []*NS{busy, other} {
		requireNamed(t, ns)
	}
	ln.Close()
	for _, ns := range []*NS{busy, other} {
		requireDeleted(t, ns)
	}
}
