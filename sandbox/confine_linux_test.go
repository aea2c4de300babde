package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
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
	if err := dropCapabilities(); err != nil {
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
