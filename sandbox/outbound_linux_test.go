package sandbox

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOutboundAddr dials a listener on the loopback through the relay's
// dialer with an outbound address: the connection comes from it, for
// the family that has one, and from routing's choice for the other.
func TestOutboundAddr(t *testing.T) {
	for _, tc := range []struct {
		name, listen string
		cfg          Config
		from         netip.Addr
	}{
		{"IPv4 bound", "127.0.0.1:0", Config{OutboundAddr4: netip.MustParseAddr("127.0.0.7")}, netip.MustParseAddr("127.0.0.7")},
		{"IPv4 unbound", "127.0.0.1:0", Config{OutboundAddr6: netip.MustParseAddr("::1")}, netip.MustParseAddr("127.0.0.1")},
		{"IPv6 bound", "[::1]:0", Config{OutboundAddr4: netip.MustParseAddr("127.0.0.7"), OutboundAddr6: netip.MustParseAddr("::1")}, netip.MustParseAddr("::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", tc.listen)
			if err != nil {
				require.Contains(t, tc.listen, "::1", "only IPv6 may be missing: %v", err)
				return // no IPv6 loopback here
			}
			defer ln.Close()
			d, err := dialer(&tc.cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, tc.from, c.LocalAddr().(*net.TCPAddr).AddrPort().Addr())
			s, err := ln.Accept()
			require.NoError(t, err)
			s.Close()
		})
	}
	// An address the host does not have fails each connection, saying
	// which address.
	d, err := dialer(&Config{OutboundAddr4: netip.MustParseAddr("192.0.2.1")})
	require.NoError(t, err)
	_, err = d.DialContext(context.Background(), "tcp", "127.0.0.1:9")
	require.ErrorContains(t, err, "bind to the outbound address 192.0.2.1")
}
