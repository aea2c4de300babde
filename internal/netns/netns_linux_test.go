package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requirePrivilege skips t without the privilege to build namespaces,
// and fails it if building one fails for any other reason.
func requirePrivilege(t *testing.T) {
	t.Helper()
	if err := Probe(); err != nil {
		if NoPrivilege(err) {
			testenv.Skip(t, "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to build network namespaces: %v", err)
		}
		t.Fatalf("network namespaces: %v: the environment is broken (a missing privilege would skip)", err)
	}
}

// newNS creates a namespace that is deleted when t ends, and fails t if
// it cannot be deleted: a namespace left behind is a fault (the
// netnstest package does this for other packages' tests; this package's
// cannot import it).
func newNS(t *testing.T, name string) *NS {
	t.Helper()
	ns, err := New(name)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ns.Close(), "delete network namespace %s", ns.Name) })
	return ns
}

// twoNamespaces returns two fresh namespaces, deleted when t ends, or
// skips t without the privilege to make them.
func twoNamespaces(t *testing.T) (a, b *NS) {
	t.Helper()
	requirePrivilege(t)
	return newNS(t, "ustack-test-a"), newNS(t, "ustack-test-b")
}

// TestNewNamesEachCall: every New gets a name of its own, the same
// prefix twice included, so that a namespace one test could not delete
// never makes a later New fail.
func TestNewNamesEachCall(t *testing.T) {
	requirePrivilege(t)
	a, b := newNS(t, "ustack-test-same"), newNS(t, "ustack-test-same")
	require.NotEqual(t, a.Name, b.Name)
	require.NoError(t, a.Close())
	c := newNS(t, "ustack-test-same")
	require.NotEqual(t, a.Name, c.Name, "a name is not reused after Close either")
	for _, ns := range []*NS{b, c} {
		_, err := os.Stat(filepath.Join(runDir, ns.Name))
		require.NoError(t, err)
	}
}

func TestVethBetweenNamespaces(t *testing.T) {
	a, b := twoNamespaces(t)
	require.NoError(t, Veth(a, "va", b, "vb", 9000))
	require.NoError(t, a.AddAddr("va", netip.MustParsePrefix("198.18.1.1/24"), netip.MustParsePrefix("fd00:1::1/64")))
	require.NoError(t, b.AddAddr("vb", netip.MustParsePrefix("198.18.1.2/24"), netip.MustParsePrefix("fd00:1::2/64")))

	var ln net.Listener
	require.NoError(t, b.Do(func() (err error) {
		ln, err = net.Listen("tcp", "[fd00:1::2]:7000")
		return err
	}))
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	var c net.Conn
	require.NoError(t, a.Do(func() (err error) {
		c, err = net.Dial("tcp", "[fd00:1::2]:7000")
		return err
	}))
	defer c.Close()
	buf := make([]byte, 2)
	_, err := c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hi", string(buf))
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "idempotent")
	require.Error(t, a.Do(func() error { return nil }))
}

// TestNoPrivilege: refusals for lack of privilege are told apart from
// every other failure, through wrapping.
func TestNoPrivilege(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("netns x: %w", ErrNoPrivilege), true},
		{fmt.Errorf("create a veth pair: %w", unix.EPERM), true},
		{os.NewSyscallError("open /dev/net/tun", unix.EACCES), true},
		{&os.PathError{Op: "mount", Path: "/run/netns", Err: unix.EROFS}, false},
		{fmt.Errorf("link probe0: %w", unix.EEXIST), false},
		{os.NewSyscallError("open /dev/net/tun", unix.ENOENT), false},
		{errors.New("operation not permitted"), false},
	} {
		require.Equal(t, tc.want, NoPrivilege(tc.err), "%v", tc.err)
	}
}

// TestSetOffloads: off turns every offload SetOffloads names off, as the
// kernel reads them back, and on turns them on again; a missing
// interface, or an offload the driver will not turn off, is an error that
// names it.
func TestSetOffloads(t *testing.T) {
	a, b := twoNamespaces(t)
	require.NoError(t, Veth(a, "va", b, "vb", 1500))
	read := func(ns *NS, ifname string) (got map[string]bool) {
		require.NoError(t, ns.Do(func() (err error) {
			got, err = offloads(ifname)
			return err
		}))
		require.Len(t, got, len(offloadCommands))
		return got
	}
	for _, on := range []bool{false, true, false} {
		require.NoError(t, a.SetOffloads("va", on))
		for name, v := range read(a, "va") {
			require.Equal(t, on, v, "va %s after SetOffloads(%v)", name, on)
		}
	}
	require.True(t, read(b, "vb")["tcp-segmentation-offload"], "the peer's offloads are its own")
	err := a.SetOffloads("nosuch0", false)
	require.ErrorContains(t, err, "link nosuch0")
	// The loopback device's driver fixes scatter-gather on.
	err = a.SetOffloads("lo", false)
	require.ErrorContains(t, err, "link lo: ethtool scatter-gather off")
}
