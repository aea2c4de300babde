package forward

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/flowload"
)

// BenchmarkRelayConnect opens flows through the relay to a host-loopback
// server, 32 connecting at once, each carrying one byte each way and then
// held, as scripts/flows.sh does through a sandbox: the relay's share of
// a flow's setup (the SYN, the host dial, the handshake, the first byte
// both ways) without the TUN device and the sandbox's kernel. The flows
// are closed after the timed part.
func BenchmarkRelayConnect(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		flowload.Serve(ln)
	}()
	defer func() {
		ln.Close()
		recv(b, served, "the server ends")
	}()
	pol := &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	e := newEnv(b, Relay(&net.Dialer{}, pol), &Options{MaxFlows: -1, MaxTCP: -1, MemoryBudget: -1})
	dst := netip.AddrPortFrom(gateway, uint16(ln.Addr().(*net.TCPAddr).Port))
	const conc = 32
	dial := func(ctx context.Context) (net.Conn, error) { return e.A.DialTCP(ctx, dst) }
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	conns, _, err := flowload.OpenWith(context.Background(), dial, dst.String(), b.N, conc)
	b.StopTimer()
	require.NoError(b, err)
	defer flowload.Close(conns)
	// CPU, not time, is what a flow costs on a busy machine: the wall
	// time of a run includes waits for whatever else runs.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	require.NoError(tb, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
