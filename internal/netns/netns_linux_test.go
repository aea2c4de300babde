package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// twoNamespaces returns two fresh namespaces, closed when t ends, or
// skips t without the privilege to make them.
func twoNamespaces(t *testing.T) (a, b *NS) {
	t.Helper()
	if err := Probe(); err != nil {
		if NoPrivilege(err) {
			testenv.Skip(t, "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to build network namespaces: %v", err)
		}
		t.Fatalf("network namespaces: %v: the environment is broken (a missing privilege would skip)", err)
	}
	a, err := New("ustack-test-a")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err = New("ustack-test-b")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return a, b
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
