package wgnet_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDialRefused: a connection the peer refuses fails with
// ECONNREFUSED, as a kernel socket's does, whichever way it was dialed.
func TestDialRefused(t *testing.T) {
	tnetA, _ := ustackPair(t)
	closed := netip.AddrPortFrom(addrB, 83) // nothing listens there
	ctx, cancel := context.WithTimeout(t.Context(), dialTimeout)
	defer cancel()
	for name, dial := range map[string]func() (net.Conn, error){
		"DialContextTCPAddrPort": func() (net.Conn, error) { return tnetA.DialContextTCPAddrPort(ctx, closed) },
		"DialContextTCP":         func() (net.Conn, error) { return tnetA.DialContextTCP(ctx, net.TCPAddrFromAddrPort(closed)) },
		"DialContext": func() (net.Conn, error) {
			return tnetA.DialContext(ctx, "tcp", net.JoinHostPort(closed.Addr().String(), strconv.Itoa(int(closed.Port()))))
		},
	} {
		c, err := dial()
		require.ErrorIs(t, err, syscall.ECONNREFUSED, name)
		require.Nil(t, c, name)
	}
}
