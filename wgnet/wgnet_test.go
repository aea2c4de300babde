package wgnet_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ustack-dev/ustack/internal/xfer"
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

// transferSize is what each direction carries in the transfer tests.
const transferSize = 64 << 20

func TestTransferUstackBothSides(t *testing.T) {
	a, _ := ustackSide(t, addrA, nil)
	b, _ := ustackSide(t, addrB, nil)
	join(t, a, b)
	c, s := connect(t, a, b, 5001)
	_, err := xfer.Exchange(c, s, transferSize, xfer.Timeout(transferSize))
	require.NoError(t, err)
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
}
