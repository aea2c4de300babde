// Package wgaccounts checks the accounting of bench's wg-netstack link
// (wireguard-go's own netstack behind the tunnel) in a test binary of its
// own: package bench's tests run gVisor's reference leak check
// (internal/leakcheck), and wireguard-go's tun/netstack never releases
// the packet buffers it injects (netTun.Write builds a PacketBuffer for
// each packet the device writes, hands it to its stack and drops its
// reference without DecRef: three reference-counted objects per packet,
// some 24k for a 50 ms udp_stream cell), so the check would report its
// leaks, not ours. Goroutines are still checked. The wg link, ustack
// behind the same tunnel, is leak-checked with every qdisc in package
// bench.
package wgaccounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/sched"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryTestAccounts runs each test briefly through the tunnel with
// wireguard-go's netstack and checks the structure and the accounting of
// its result (Result.Check), never its speed.
func TestEveryTestAccounts(t *testing.T) {
	for _, test := range bench.Tests() {
		t.Run(test, func(t *testing.T) {
			c := bench.Config{Test: test, Link: bench.LinkWGNetstack, Qdisc: sched.None, Senders: 3, Duration: 50 * time.Millisecond}
			r, err := bench.Run(context.Background(), c)
			require.NoError(t, err)
			require.NoError(t, r.Check(c))
		})
	}
}
