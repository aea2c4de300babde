package wgnet_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/wgnet"
)

// TestMain checks that no goroutine outlives the tests. It does not run
// gVisor's reference leak check (internal/leakcheck), which link/pktio's
// tests run on the endpoint: wireguard-go's tun/netstack, which the
// comparison tests and benchmarks run, never releases the packet buffers
// it injects (netTun.Write drops its reference to each without DecRef),
// so the check would report its leaks, not ours. Benchmarks run without
// any check, so that tracking does not distort what they measure.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.bench").Value.String() == "" {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// dialTimeout bounds a dial through the tunnel, handshake included: a
// hang is a failure, slowness is not.
const dialTimeout = 30 * time.Second

func TestTransferUstackBothSides(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *wgnet.Options
	}{
		{"defaults", nil},
		{"busy-poll", &wgnet.Options{BusyPoll: poll.Mode{Kind: poll.Adaptive, Budget: poll.DefaultBudget}}},
		{"enqlock-batch16", &wgnet.Options{Qdisc: "enqlock", BatchSize: 16}},
		{"no-gro-no-gso", &wgnet.Options{Link: &pktio.Options{NoGRO: true, NoGSO: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, na := ustackSide(t, addrA, tc.opts)
			b, _ := ustackSide(t, addrB, tc.opts)
			join(t, a, b)
			c, s := connect(t, a, b, 5001)
			_, err := xfer.Exchange(c, s, transferSize, xfer.Timeout(transferSize))
			require.NoError(t, err)
			st := na.Endpoint().LinkStats()
			require.Zero(t, st.RXBadChecksum+st.RXMalformed+st.RXErrors+st.TXErrors)
		})
	}
}

func TestTransferUstackToNetstack(t *testing.T) {
	a, _ := ustackSide(t, addrA, nil)
	b := netstackSide(t, addrB)
	join(t, a, b)
	t.Run("ustack dials", func(t *testing.T) {
		c, s := connect(t, a, b, 5001)
		_, err := xfer.Exchange(c, s, transferSize, xfer.Timeout(transferSize))
		require.NoError(t, err)
	})
	t.Run("netstack dials", func(t *testing.T) {
		// connect dials addrB from its first side: swap the roles by
		// listening on a (ustack) and dialing from b (netstack).
		ln, err := a.listen(5002)
		require.NoError(t, err)
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			accepted <- c
		}()
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		c, err := b.dial(ctx, netip.AddrPortFrom(addrA, 5002))
		require.NoError(t, err)
		defer c.Close()
		s := <-accepted
		require.NotNil(t, s)
		defer s.Close()
		_, err = xfer.Exchange(c, s, transferSize, xfer.Timeout(transferSize))
		require.NoError(t, err)
	})
}
