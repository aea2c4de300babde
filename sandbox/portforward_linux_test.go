package sandbox

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/stack"
)

// forwardEnv is a Sandbox without a namespace or a device, enough for its
// port forwards: its relay stack is linked in memory to a stack that
// stands for the sandbox (inside, at the sandbox's address), so the port
// forwards run unprivileged.
type forwardEnv struct {
	s      *Sandbox
	inside *stack.Stack
}

func newForwardEnv(t testing.TB) *forwardEnv {
	t.Helper()
	cfg, err := Config{NoIPv6: true}.normalize()
	require.NoError(t, err)
	la, lb, err := mem.Pair(nil)
	require.NoError(t, err)
	inside, err := stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { inside.Close() })
	id, err := inside.AddNIC(la, nil)
	require.NoError(t, err)
	require.NoError(t, inside.AddAddress(id, cfg.Addr4))

	st, err := stack.New(&stack.Options{Transparent: true})
	require.NoError(t, err)
	s := &Sandbox{cfg: cfg, st: st}
	t.Cleanup(func() { s.Close() }) // closes st too
	id, err = st.AddNIC(lb, nil)
	require.NoError(t, err)
	require.NoError(t, st.AddAddress(id, netip.PrefixFrom(cfg.Gateway4, cfg.Addr4.Bits())))
	s.fw, err = forward.New(st, forward.Relay(&net.Dialer{}, policy(&cfg, s.dns)), nil)
	require.NoError(t, err)
	s.pf, err = NewPortForwarder(&PortForwarderOptions{Forwarder: s.fw})
	require.NoError(t, err)
	return &forwardEnv{s: s, inside: inside}
}

// settle waits until at most want goroutines are left, and fails with
// how many there are if that does not happen within a generous bound.
func settle(t *testing.T, want int, what string) {
	t.Helper()
	// Polled here, not by require.Eventually, whose checks run in
	// goroutines of their own.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= want {
			return
		}
	}
	t.Fatalf("%s: %d goroutines, want at most %d", what, n, want)
}

// TestForwardIdleFlowsHoldNoGoroutine opens n port-forwarded TCP flows
// and checks that, idle, they hold no goroutine (the relay's host poller
// is the only one they add), that they still carry bytes both ways once
// woken, pass half-closes both ways and a checked transfer, and that
// Close resets the rest on both sides and leaves nothing behind.
func TestForwardIdleFlowsHoldNoGoroutine(t *testing.T) {
	const n = 64
	e := newForwardEnv(t)
	s := e.s
	ln, err := e.inside.ListenTCP(netip.AddrPortFrom(s.cfg.Addr4.Addr(), 7000))
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn)
	go func() {
		// One goroutine serves every flow, so that the count of the
		// test's goroutines is the forward's.
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err == nil {
				c.Write(b[:])
			}
			accepted <- c
		}
	}()
	require.NoError(t, s.startForward(PortForward{Host: netip.MustParseAddrPort("127.0.0.1:0"), Port: 7000}))
	addr := s.PortForwardAddrs()[0]
	base := runtime.NumGoroutine()

	hosts := make([]net.Conn, n)  // the host's clients
	inside := make([]net.Conn, n) // the sandbox's ends of the same flows
	for i := range n {
		h, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		defer h.Close()
		_, err = h.Write([]byte{byte(i)})
		require.NoError(t, err)
		var b [1]byte
		_, err = io.ReadFull(h, b[:])
		require.NoError(t, err)
		require.Equal(t, byte(i), b[0])
		c := <-accepted
		defer c.Close()
		hosts[i], inside[i] = h, c
	}
	// The relay's host poller is the one goroutine the flows add.
	settle(t, base+1, "idle port-forwarded flows")
	require.Equal(t, int64(n), s.Stats().TCPFlows)
	require.Equal(t, uint64(n), s.Stats().PortForwardConns)

	// Parked flows wake either way: the host speaks first on half of
	// them, the sandbox on the other half, each answered.
	for i := range n {
		first, second := hosts[i], inside[i]
		if i%2 == 1 {
			first, second = second, first
		}
		require.NoError(t, xfer.RoundTrip(first, second, []byte{'m', byte(i)}))
	}
	settle(t, base+1, "port-forwarded flows idle again")

	// Half-closes cross from parked flows both ways, and the closed
	// side's peer can still answer: flow 0 from the host, flow 1 from
	// the sandbox.
	for i, pair := range [][2]net.Conn{{hosts[0], inside[0]}, {inside[1], hosts[1]}} {
		closer, other := pair[0], pair[1]
		require.NoError(t, closer.(interface{ CloseWrite() error }).CloseWrite(), "flow %d", i)
		other.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := other.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "flow %d: the half-close crossed", i)
		_, err = other.Write([]byte("late"))
		require.NoError(t, err, "flow %d", i)
		got := make([]byte, 4)
		closer.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(closer, got)
		require.NoError(t, err, "flow %d", i)
		require.Equal(t, "late", string(got), "flow %d", i)
		require.NoError(t, other.Close())
		_, err = closer.Read(got)
		require.ErrorIs(t, err, io.EOF, "flow %d: the close crossed", i)
	}
	// A transfer each way at once, byte-exact, half-closing both ways.
	size := int64(1 << 20)
	_, err = xfer.Exchange(hosts[2], inside[2], size, xfer.Timeout(size))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Stats().TCPFlows == n-3 }, 10*time.Second, time.Millisecond)
	st := s.Stats()
	// Up is from the sandbox: its echoes, answers, "late" once and the
	// transfer; the host's side likewise.
	require.Equal(t, uint64(n*(1+2)+4+size), st.TCPBytesUp)
	require.Equal(t, uint64(n*(1+2)+4+size), st.TCPBytesDown)
	require.Zero(t, st.TCPResets)
	settle(t, base+1, "after the transfer")

	// Close ends the parked flows, with resets on both sides.
	require.NoError(t, s.Close())
	require.Zero(t, s.Stats().TCPFlows)
	require.Zero(t, s.Stats().MemoryReserved)
	for i := 3; i < n; i++ {
		hosts[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := hosts[i].Read(make([]byte, 1))
		require.ErrorContains(t, err, "reset", "host %d", i)
		inside[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = inside[i].Read(make([]byte, 1))
		require.ErrorContains(t, err, "reset", "sandbox %d", i)
	}
	ln.Close()
	for range accepted {
	}
	settle(t, base-2, "after Close") // the accept loops ended too
}

// BenchmarkForwardPingPong is a request/response exchange of 64 bytes
// from a host client through a port forward to an echo server in the
// sandbox: the forward's share of a request/response service.
func BenchmarkForwardPingPong(b *testing.B) {
	e := newForwardEnv(b)
	ln, err := e.inside.ListenTCP(netip.AddrPortFrom(e.s.cfg.Addr4.Addr(), 7000))
	require.NoError(b, err)
	defer ln.Close()
	go xfer.EchoStreams(ln)
	require.NoError(b, e.s.startForward(PortForward{Host: netip.MustParseAddrPort("127.0.0.1:0"), Port: 7000}))
	c, err := net.Dial("tcp", e.s.PortForwardAddrs()[0].String())
	require.NoError(b, err)
	defer c.Close()
	xfer.PingPong(b, c, 64)
}
