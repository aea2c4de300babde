package stack_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// transferBothWays sends size bytes from a to b and size bytes from b to a
// at the same time over one connection, and checks both arrive intact.
func transferBothWays(t *testing.T, p *stacktest.Pair, server netip.Addr, size int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xfer.Timeout(size))
	defer cancel()
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(server, 5001))
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	c, err := p.A.DialTCP(ctx, netip.AddrPortFrom(server, 5001))
	require.NoError(t, err)
	defer c.Close()
	sc := <-accepted
	require.NotNil(t, sc, "accept")
	defer sc.Close()
	_, err = xfer.Exchange(c, sc, size, xfer.Timeout(size))
	require.NoError(t, err)
}

func TestTCPTransferBothWays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server netip.Addr
	}{{"ipv4", stacktest.B4}, {"ipv6", stacktest.B6}} {
		t.Run(tc.name, func(t *testing.T) {
			p := stacktest.New(t, nil)
			transferBothWays(t, p, tc.server, transferSize)
		})
	}
}
