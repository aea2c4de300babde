//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/stack"
)

// raceBuild reports whether the test binary was built with -race. It reads
// the build settings, which every test binary carries, so that this file
// needs no build-tagged companion.
var raceBuild = sync.OnceValue(func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
})

// sized scales a transfer size down under the race detector, which
// slows the stack about tenfold: the data path exercised is the same.
func sized(full int64) int64 {
	if raceBuild() {
		return max(full/8, 1<<20)
	}
	return full
}

// skip skips the test with the reason given, or fails it when the suite
// is required. It is the only way tests in this package skip.
func skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	testenv.Skip(tb, format, args...)
}

// needPrivilege ends the test when a probe for what the test needs
// failed: it skips when the probe failed for lack of a privilege, naming
// it (what says what the test needs), and fails on any other error,
// which means the environment is broken rather than unprivileged.
func needPrivilege(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if netns.NoPrivilege(err) {
		skip(tb, "%s: %v", what, err)
	}
	tb.Fatalf("%s: %v: this is a broken environment, not a missing privilege, so the test fails instead of skipping", what, err)
}

// needTool skips the test when the program it runs is not installed.
func needTool(tb testing.TB, name, pkg string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		skip(tb, "%s is not installed (apt-get install %s)", name, pkg)
	}
}

// nsProbe checks once whether this process may build namespaces.
var nsProbe = sync.OnceValue(netns.Probe)

// nsPrivilege names what nsProbe needs, for needPrivilege.
const nsPrivilege = "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to build network namespaces and veth pairs"

// requireNamespaces skips the test unless this process may build
// namespaces (see needPrivilege).
func requireNamespaces(tb testing.TB) {
	tb.Helper()
	needPrivilege(tb, nsPrivilege, nsProbe())
}

// udpEchoFromUstack runs a UDP echo server in the kernel's namespace k on
// kaddr and has the ustack host s exchange datagrams of several sizes with
// it, the larger ones fragmented both ways.
func udpEchoFromUstack(tb testing.TB, k *netns.NS, s *stack.Stack, kaddr netip.Addr) {
	tb.Helper()
	server := netip.AddrPortFrom(kaddr, 7007)
	var pc net.PacketConn
	require.NoError(tb, k.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", server.String())
		return err
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		xfer.EchoPackets(pc)
	}()
	defer func() { pc.Close(); <-done }()

	c, err := s.DialUDP(netip.AddrPort{}, server)
	require.NoError(tb, err)
	defer c.Close()
	buf := make([]byte, 65536)
	for i, size := range []int{1, 100, 1000, 1452, 1472, 1473, 3000, 8000, 30000} {
		msg := make([]byte, size)
		for j := range msg {
			msg[j] = byte(i + j)
		}
		var got []byte
		// UDP may lose a datagram: a few tries, each with its own deadline.
		for try := 0; try < 5 && got == nil; try++ {
			_, err := c.Write(msg)
			require.NoError(tb, err, "write %d bytes", size)
			require.NoError(tb, c.SetReadDeadline(time.Now().Add(time.Second)))
			m, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				require.True(tb, errors.As(err, &ne) && ne.Timeout(), "read echo of %d bytes: %v", size, err)
				continue
			}
			got = buf[:m]
		}
		require.Equal(tb, msg, got, "echo of %d bytes", size)
	}
}

// reachable pings each of dsts from s until it answers, for up to 10 s
// each: neighbour resolution has worked both ways, and new IPv6
// addresses are usable (an address is tentative, and drops what is sent
// to it, until duplicate address detection ends). One ping alone would
// fail the test whenever the first echo met a tentative address.
func reachable(tb testing.TB, s *stack.Stack, payload string, dsts ...netip.Addr) {
	tb.Helper()
	for _, dst := range dsts {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, err := s.Ping(ctx, dst, []byte(payload))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("ping %v from ustack: %v", dst, err)
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and a test's
// reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
