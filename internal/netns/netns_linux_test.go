package netns

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestVethBetweenNamespaces(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skipf("network namespaces unavailable: %v", err)
	}
	a, err := New("ustack-test-a")
	require.NoError(t, err)
	defer a.Close()
	b, err := New("ustack-test-b")
	require.NoError(t, err)
	defer b.Close()
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
	_, err = c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hi", string(buf))
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "idempotent")
	require.Error(t, a.Do(func() error { return nil }))
}
