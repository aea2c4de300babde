package stack_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// busyPollPair builds two hosts that busy poll in mode. Their UDP sockets
// see a full NIC queue as ENOBUFS, so tests can retry rather than lose.
func busyPollPair(t *testing.T, mode string) *stacktest.Pair {
	t.Helper()
	m, err := poll.Parse(mode)
	require.NoError(t, err)
	return stacktest.New(t, &stacktest.Options{Stack: &stack.Options{BusyPoll: m, UDPRecvErr: true}})
}

func TestBusyPollNetTestConn(t *testing.T) {
	for _, mode := range []string{"on:50", "adaptive"} {
		t.Run(mode, func(t *testing.T) {
			m, err := poll.Parse(mode)
			require.NoError(t, err)
			netTestConn(t, &stacktest.Options{Stack: &stack.Options{BusyPoll: m}})
		})
	}
}

// TestBusyPollTransfer moves data both ways with every mode: readers that
// busy poll deliver it themselves, intact.
func TestBusyPollTransfer(t *testing.T) {
	for _, mode := range []string{"on:50", "spin:50", "adaptive"} {
		t.Run(mode, func(t *testing.T) {
			p := busyPollPair(t, mode)
			transferBothWays(t, p, stacktest.B4, 4<<20)
			s := p.A.Stats()
			require.Equal(t, mode, s.BusyPoll.Mode)
			require.Positive(t, s.BusyPoll.Waits, "readers found their conns empty and busy polled")
			require.Equal(t, s.BusyPoll.Waits, s.BusyPoll.Hits+s.BusyPoll.Parks)
			if mode == "spin:50" {
				polled := p.LinkA.LinkStats().RXBusyPolled + p.LinkB.LinkStats().RXBusyPolled
				require.Positive(t, polled, "readers ran receive rounds")
			}
		})
	}
}

// TestBusyPollUDP: datagrams reach a busy-polling reader, on a connected
// and on an unconnected socket, whole and in order.
func TestBusyPollUDP(t *testing.T) {
	p := busyPollPair(t, "spin:100")
	srv, err := p.B.ListenUDP(netip.AddrPortFrom(stacktest.B4, 7000))
	require.NoError(t, err)
	defer srv.Close()
	cl, err := p.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(stacktest.B4, 7000))
	require.NoError(t, err)
	defer cl.Close()
	buf := make([]byte, 2000)
	for i := range 200 {
		msg := []byte{byte(i), byte(i >> 8), 1, 2, 3}
		_, err := cl.Write(msg)
		require.NoError(t, err)
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, from, err := srv.ReadFrom(buf)
		require.NoError(t, err)
		require.Equal(t, msg, buf[:n])
		_, err = srv.WriteTo(buf[:n], from)
		require.NoError(t, err)
		require.NoError(t, cl.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, err = cl.Read(buf)
		require.NoError(t, err)
		require.Equal(t, msg, buf[:n])
	}
	require.Positive(t, p.B.Stats().BusyPoll.Waits)
}

// TestBusyPollSingleP is the 2014 patch's scenario: one P, a reader that
// busy polls with a long budget, and the goroutine that produces its data
// runnable on the same P. The runnable check must let the producer run:
// every wait ends because data came or because the producer wanted the P,
// never by sitting out the budget while the producer waited.
func TestBusyPollSingleP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := busyPollPair(t, "on:1000")
	srv, err := p.B.ListenUDP(netip.AddrPortFrom(stacktest.B4, 7001))
	require.NoError(t, err)
	defer srv.Close()
	cl, err := p.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(stacktest.B4, 7001))
	require.NoError(t, err)
	defer cl.Close()
	const total = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg := make([]byte, 64)
		for i := range total {
			msg[0], msg[1] = byte(i), byte(i>>8)
			for {
				if _, err := cl.Write(msg); err == nil {
					break
				} else if !errors.Is(err, syscall.ENOBUFS) {
					t.Errorf("write %d: %v", i, err)
					return
				}
				runtime.Gosched()
			}
			if i%8 == 0 {
				runtime.Gosched() // let the reader find an empty socket now and then
			}
		}
	}()
	buf := make([]byte, 2000)
	got := 0
	for got < total {
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, _, err := srv.ReadFrom(buf)
		require.NoError(t, err, "after %d datagrams", got)
		got++
	}
	wg.Wait()
	s := p.B.Stats().BusyPoll
	t.Logf("waits %d, hits %d, runnable exits %d, exhausted %d, spin %v", s.Waits, s.Hits, s.RunnableExits, s.BudgetExhausted, s.SpinTime)
	require.Positive(t, s.Waits)
	require.Positive(t, s.RunnableExits, "the reader stepped aside for the producer")
	require.LessOrEqual(t, s.BudgetExhausted, s.Waits/10, "a reader that sits out its budget starves the producer")
}

// TestBusyPollCloseInterrupts: Close ends a Read whether the reader is
// spinning or parked, for TCP and UDP.
func TestBusyPollCloseInterrupts(t *testing.T) {
	p := busyPollPair(t, "spin:1000")
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 7002))
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	tc, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 7002))
	require.NoError(t, err)
	sc := <-accepted
	require.NotNil(t, sc)
	defer sc.Close()
	uc, err := p.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 7003))
	require.NoError(t, err)
	// parked false: close at once, while the reader is likely still in
	// its 1 ms spin; true: close once its spin has ended and it parked.
	for _, parked := range []bool{false, true} {
		for _, c := range []net.Conn{tc, uc.(net.Conn)} {
			if parked && c == tc {
				// Reconnect: tc was closed in the first round.
				continue
			}
			parks := p.A.Stats().BusyPoll.Parks
			done := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 100))
				done <- err
			}()
			if parked {
				waitParked(t, p.A, parks)
			}
			require.NoError(t, c.Close())
			select {
			case err := <-done:
				require.Error(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("Close did not interrupt a Read (%T, parked %v)", c, parked)
			}
		}
		if !parked {
			uc, err = p.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 7003))
			require.NoError(t, err)
		}
	}
	// A parked TCP reader too.
	tc2, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 7002))
	require.NoError(t, err)
	parks := p.A.Stats().BusyPoll.Parks
	done := make(chan error, 1)
	go func() {
		_, err := tc2.Read(make([]byte, 100))
		done <- err
	}()
	waitParked(t, p.A, parks)
	require.NoError(t, tc2.Close())
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt a parked TCP Read")
	}
	ln.Close()
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}

// waitParked waits until a reader of s has ended a busy-polling wait
// without data and parked: its poller counts more parks than before.
func waitParked(t *testing.T, s *stack.Stack, before uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Stats().BusyPoll.Parks > before }, 10*time.Second, 100*time.Microsecond,
		"the reader never parked")
}

// TestBusyPollAdaptiveIdle: on an idle stack, adaptive stops spinning:
// reads that find nothing take its budget to zero, and then only rare
// probes poll.
func TestBusyPollAdaptiveIdle(t *testing.T) {
	p := busyPollPair(t, "adaptive")
	uc, err := p.B.ListenUDP(netip.AddrPortFrom(stacktest.B4, 7004))
	require.NoError(t, err)
	defer uc.Close()
	buf := make([]byte, 100)
	read := func(n int) {
		for range n {
			require.NoError(t, uc.SetReadDeadline(time.Now().Add(time.Millisecond)))
			_, _, err := uc.ReadFrom(buf)
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout())
		}
	}
	read(20)
	before := p.B.Stats().BusyPoll
	require.Zero(t, before.Budget, "twenty empty reads took the budget to zero")
	read(256)
	s := p.B.Stats().BusyPoll.Sub(before)
	// A read whose deadline passed before it started fails at once,
	// without a wait, as Go's sockets do: count the waits there were.
	require.Positive(t, s.Waits)
	require.LessOrEqual(t, s.Waits, uint64(256))
	require.Equal(t, s.Waits, s.Parks, "every wait parked")
	require.Zero(t, s.Hits)
	require.LessOrEqual(t, s.Probes, s.Waits/32+1, "only probes spin")
	require.LessOrEqual(t, s.BudgetExhausted+s.RunnableExits, s.Probes)
}
