package forward

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
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
		<-served
	}()
	pol := &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	e := newEnv(b, Relay(&net.Dialer{}, pol), &Options{MaxFlows: -1, MaxTCP: -1, MemoryBudget: -1})
	dst := netip.AddrPortFrom(gateway, uint16(ln.Addr().(*net.TCPAddr).Port))
	const conc = 32
	conns := make([]net.Conn, b.N)
	defer flowload.Close(conns)
	next := make(chan int)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := e.A.DialTCP(context.Background(), dst)
				if err == nil {
					conns[i] = c
					err = exchangeByte(c, byte(i))
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("flow %d: %w", i, err):
					default:
					}
				}
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	// CPU, not time, is what a flow costs on a busy machine: the wall
	// time of a run includes waits for whatever else runs.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	require.NoError(tb, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// exchangeByte sends v on c and waits for its echo.
func exchangeByte(c net.Conn, v byte) error {
	if _, err := c.Write([]byte{v}); err != nil {
		return err
	}
	var got [1]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return err
	}
	if got[0] != v {
		return fmt.Errorf("echo %#x, sent %#x", got[0], v)
	}
	return nil
}
