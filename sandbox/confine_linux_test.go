package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/internal/xfer"
)

// confineChildEnv makes the test binary, re-executed, confine itself and
// check what it may still do (the filter cannot be undone, so it is
// loaded in a process of its own).
const confineChildEnv = "USTACK_TEST_CONFINE_CHILD"

// confineChildTimeout bounds the confined child, which takes a few
// seconds on a loaded 2-core machine: a limit for a hang, not a timing.
const confineChildTimeout = 5 * time.Minute

// TestConfine loads the relay's seccomp policy in a child process and
// checks that it can no longer execute a program, fork or open a raw
// socket, while TCP and UDP traffic over many goroutines and new threads
// keeps flowing.
func TestConfine(t *testing.T) {
	if os.Getenv(confineChildEnv) != "" {
		if err := confinedChild(); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("confined ok")
		os.Exit(0)
	}
	if !seccomp.Supported() {
		testenv.Skip(t, "this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), confineChildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestConfine$", "-test.count=1")
	cmd.Env = append(os.Environ(), confineChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "confined ok") {
		t.Fatalf("confined child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func confinedChild() error {
	// Sockets made before confinement, as the relay's are.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	p, err := confinePolicy()
	if err != nil {
		return err
	}
	// Threads the runtime has before the drop, some blocked in system
	// calls: the drop must reach them too.
	runtime.GOMAXPROCS(8)
	stop := make(chan struct{})
	var sleepers, locked sync.WaitGroup
	for range 8 {
		sleepers.Add(1)
		locked.Add(1)
		go func() {
			defer sleepers.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			<-stop
		}()
	}
	locked.Wait()
	before, err := threadCaps()
	if err != nil {
		return err
	}
	if err := dropPrivileges(1 << keptCap); err != nil {
		return err
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}); err != nil {
		return err
	}
	// Denied: executing a program, forking, raw and packet sockets.
	if err := syscall.Exec("/bin/true", []string{"true"}, nil); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("execve: %v, want EPERM", err)
	}
	// A failed exec proves nothing about fork: the forked child could
	// still serve. fork(2) is clone(SIGCHLD), no CLONE_THREAD.
	if pid, errno := rawFork(); errno != unix.EPERM {
		if errno != 0 {
			return fmt.Errorf("clone(SIGCHLD): %v, want EPERM", errno)
		}
		var ws unix.WaitStatus
		_, werr := unix.Wait4(int(pid), &ws, 0, nil)
		return fmt.Errorf("clone(SIGCHLD) forked process %d (reaped: %v), want EPERM", pid, werr)
	}
	if err := exec.Command("/bin/true").Run(); err == nil {
		return errors.New("a command ran under the filter")
	}
	if _, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("raw socket: %v, want EPERM", err)
	}
	if _, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, 0); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("packet socket: %v, want EPERM", err)
	}
	// Allowed: TCP and UDP, listening and dialling, from many goroutines
	// on more threads than before (the runtime clones new ones).
	runtime.GOMAXPROCS(16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		xfer.EchoStreams(ln)
	}()
	errc := make(chan error, 64)
	var clients sync.WaitGroup
	for g := range 64 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for i := range 20 {
				if err := roundTrip(ln.Addr().String(), 1+(g*997+i*131)%200000); err != nil {
					errc <- err
					return
				}
			}
			// Block a thread in a system call now and then, so that
			// the runtime starts new ones.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := udpRoundTrip(); err != nil {
				errc <- err
			}
		}()
	}
	clients.Wait()
	ln.Close()
	wg.Wait()
	close(errc)
	for err := range errc {
		return err
	}
	// Every thread, those from before the drop and those the runtime
	// started since, holds at most keptCap, and so does the bounding set
	// if it could be lowered (with CAP_SETPCAP, as root).
	after, err := threadCaps()
	close(stop)
	sleepers.Wait()
	if err != nil {
		return err
	}
	const kept = uint64(1) << keptCap
	canBound := before[0].set["CapEff"]&(1<<unix.CAP_SETPCAP) != 0
	for _, tc := range after {
		for _, name := range []string{"CapEff", "CapPrm", "CapInh", "CapAmb"} {
			if tc.set[name]&^kept != 0 {
				return fmt.Errorf("thread %s: %s %016x after the drop, want at most %016x", tc.tid, name, tc.set[name], kept)
			}
		}
		if canBound && tc.set["CapBnd"]&^kept != 0 {
			return fmt.Errorf("thread %s: CapBnd %016x after the drop, want at most %016x", tc.tid, tc.set["CapBnd"], kept)
		}
	}
	if len(after) <= len(before) {
		return fmt.Errorf("%d threads after the traffic, %d before: the check must cover threads made since the drop", len(after), len(before))
	}
	fmt.Printf("%d threads before the drop (CapEff %016x, cgo %v), %d after, each at most %016x\n",
		len(before), before[0].set["CapEff"], cgoBuild(), len(after), kept)
	return nil
}

// rawFork forks this process as fork(2) does, with a raw clone(SIGCHLD),
// and returns the child's PID or the error. The child, a copy of this
// process with one thread, exits at once without running any Go code
// that could grow the stack or reach the scheduler (nosplit, norace; the
// syscall package's raw calls are both, golang.org/x/sys's wrapper is
// not); the caller reaps it.
//
//go:nosplit
//go:norace
func rawFork() (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
	if errno == 0 && pid == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return pid, errno
}

// taskCaps are one thread's capability sets, from its status file.
type taskCaps struct {
	tid string
	set map[string]uint64 // CapInh, CapPrm, CapEff, CapBnd, CapAmb
}

// threadCaps reads the capability sets of every thread of this process.
func threadCaps() ([]taskCaps, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var out []taskCaps
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue // the thread ended meanwhile
		}
		tc := taskCaps{tid: e.Name(), set: map[string]uint64{}}
		for _, line := range strings.Split(string(b), "\n") {
			name, val, ok := strings.Cut(line, ":\t")
			if !ok || !strings.HasPrefix(name, "Cap") {
				continue
			}
			if tc.set[name], err = strconv.ParseUint(val, 16, 64); err != nil {
				return nil, fmt.Errorf("thread %s: %s %q: %v", e.Name(), name, val, err)
			}
		}
		if len(tc.set) != 5 {
			return nil, fmt.Errorf("thread %s: capability sets %v in its status", e.Name(), tc.set)
		}
		out = append(out, tc)
	}
	if len(out) == 0 {
		return nil, errors.New("no thread in /proc/self/task")
	}
	return out, nil
}

// cgoBuild reports whether this binary links cgo, where the drop cannot
// use the Go runtime's AllThreadsSyscall.
func cgoBuild() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				return s.Value == "1"
			}
		}
	}
	return false
}

func roundTrip(addr string, n int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i)
	}
	go c.Write(msg)
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return errors.New("tcp echo differs")
	}
	return nil
}

func udpRoundTrip() error {
	a, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := net.Dial("udp", a.LocalAddr().String())
	if err != nil {
		return err
	}
	defer b.Close()
	if _, err := b.Write([]byte("confined")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, _, err := a.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "confined" {
		return fmt.Errorf("udp: %v %q", err, buf[:n])
	}
	return nil
}

// isolateChildEnv makes the test binary, re-executed in a mount
// namespace of its own, isolate and confine itself as a relay process
// does and then try to reach the host: the value is the probe's targets.
const isolateChildEnv = "USTACK_TEST_ISOLATE_CHILD"

// isolateProbe is what the isolated child tries to reach.
type isolateProbe struct {
	Secret, Victim string // a root-owned 0600 file to rewrite, another to delete
	Sleeper        int    // a root process to signal
	WantUID        int    // the uid the child must end with
}

// TestIsolate runs the relay's isolation and confinement (Isolate, then
// ConfineProcess) in a child process, as root and as an unprivileged
// user (in a user namespace of its own, as the commands start their relay
// then), and has the child try what a compromised relay would: rewrite a
// root-owned 0600 file, delete another, signal a root process, list the
// host's root. Each must fail, the files and the process must be
// untouched, and as root the child must end as nobody.
func TestIsolate(t *testing.T) {
	if spec := os.Getenv(isolateChildEnv); spec != "" {
		if err := isolatedChild(spec); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("isolated ok")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, "isolation is tried as root and as a user made for it: run as root")
	}
	if !seccomp.Supported() {
		testenv.Skip(t, "this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)")
	}
	// Not t.TempDir, whose parent the user could not enter.
	dir, err := os.MkdirTemp("", "ustack-isolate-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	secret := filepath.Join(dir, "secret")
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(secret, []byte("root's"), 0o600))
	require.NoError(t, os.WriteFile(victim, []byte("root's"), 0o600))
	sleeper := exec.Command("sleep", "600")
	require.NoError(t, sleeper.Start())
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(dir, "sandbox.test")
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))

	for _, tc := range []struct {
		name string
		attr *syscall.SysProcAttr
		uid  int
	}{
		{"root", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}, nobody},
		{"user", nil, 0}, // filled in below: the user's own namespace
	} {
		t.Run(tc.name, func(t *testing.T) {
			attr := tc.attr
			if attr == nil {
				uid, gid := testUser(t)
				// Root of a user namespace of its own, which is
				// the user outside, as the commands start their
				// relay without root.
				attr = &syscall.SysProcAttr{
					Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
					Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
					UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
					GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
				}
			}
			spec, err := json.Marshal(isolateProbe{Secret: secret, Victim: victim, Sleeper: sleeper.Process.Pid, WantUID: tc.uid})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), confineChildTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-test.run=^TestIsolate$", "-test.count=1")
			cmd.Env = append(os.Environ(), isolateChildEnv+"="+string(spec))
			cmd.SysProcAttr = attr
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "isolated child:\n%s", out)
			require.Contains(t, string(out), "isolated ok", "%s", out)
			got, err := os.ReadFile(secret)
			require.NoError(t, err)
			require.Equal(t, "root's", string(got), "the secret was rewritten")
			require.FileExists(t, victim, "the victim was deleted")
			require.NoError(t, sleeper.Process.Signal(syscall.Signal(0)), "the sleeper is gone")
		})
	}
}

// testUser returns the uid and gid of an unprivileged user for the
// isolation test: the rootless tests' user if it exists, else nobody.
func testUser(t *testing.T) (uid, gid int) {
	if u, err := user.Lookup("ustack-test"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		return uid, gid
	}
	return nobody, nobody
}

func isolatedChild(spec string) error {
	var p isolateProbe
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		return err
	}
	// A socket made before, as the relay's are, keeps working.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := Isolate(); err != nil {
		return err
	}
	if err := ConfineProcess(); err != nil {
		return err
	}
	if uid := os.Getuid(); uid != p.WantUID {
		return fmt.Errorf("uid %d after confinement, want %d", uid, p.WantUID)
	}
	if names, err := dirNames("/"); err != nil || strings.Join(names, " ") != "proc" {
		return fmt.Errorf("the root lists %q (%v), want only its own proc", names, err)
	}
	// That /proc shows this process alone, and none of the host's files.
	if names, err := dirNames("/proc"); err != nil || strings.Join(names, " ") != "1 self thread-self" {
		return fmt.Errorf("/proc lists %q (%v), want this process alone", names, err)
	}
	if names, err := dirNames("/proc/1/root/"); err != nil || strings.Join(names, " ") != "proc" {
		return fmt.Errorf("/proc/1/root lists %q (%v), want the empty root", names, err)
	}
	if err := os.WriteFile(p.Secret, []byte("relay's"), 0o600); err == nil {
		return fmt.Errorf("rewrote %s", p.Secret)
	}
	if err := os.WriteFile("/planted", []byte("relay's"), 0o600); err == nil {
		return errors.New("wrote a file into the new root")
	}
	if err := os.Remove(p.Victim); err == nil {
		return fmt.Errorf("deleted %s", p.Victim)
	}
	if err := unix.Kill(p.Sleeper, syscall.SIGKILL); err == nil {
		return fmt.Errorf("killed root's process %d", p.Sleeper)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("still here"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("dial the listener opened before: %w", err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "still here" {
		return fmt.Errorf("the listener opened before: %q, %v", got, err)
	}
	return nil
}

// dirNames lists a directory's names, sorted.
func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, err
}
