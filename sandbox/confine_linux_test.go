package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// confineChildEnv makes the test binary, re-executed, confine itself and
// check what it may still do (the filter cannot be undone, so it is
// loaded in a process of its own).
const confineChildEnv = "USTACK_TEST_CONFINE_CHILD"

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
		t.Skip("this kernel has no seccomp filters")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfine$", "-test.count=1")
	cmd.Env = append(os.Environ(), confineChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "confined ok") {
		t.Fatalf("confined child: %v\n%s", err, out)
	}
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
	if err := dropCapabilities(); err != nil && !errors.Is(err, ErrCapabilitiesKept) {
		return err
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}); err != nil {
		return err
	}
	// Denied: executing a program, forking, raw and packet sockets.
	if err := syscall.Exec("/bin/true", []string{"true"}, nil); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("execve: %v, want EPERM", err)
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
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
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
	return nil
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
