package forward

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// parkedFlows is a relay over host sockets with n flows open, each having
// carried one byte each way: peers are the stack-side conns, hosts the
// host-side ones, in the same order.
type parkedFlows struct {
	e            *env
	peers, hosts []net.Conn
	goroutines   int // before the flows opened, with the host's listener up
}

func openParked(t *testing.T, n int) *parkedFlows {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn)
	go func() {
		// One goroutine serves every flow, so that the count of the
		// test's goroutines is the relay's.
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err == nil {
				c.Write(b[:])
			}
			accepted <- c
		}
	}()
	pol := &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	e := newEnv(t, Relay(&net.Dialer{}, pol), nil)
	pf := &parkedFlows{e: e, goroutines: runtime.NumGoroutine()}
	dst := netip.AddrPortFrom(gateway, uint16(ln.Addr().(*net.TCPAddr).Port))
	for i := range n {
		c, err := e.A.DialTCP(context.Background(), dst)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = c.Write([]byte{byte(i)})
		require.NoError(t, err)
		var b [1]byte
		_, err = io.ReadFull(c, b[:])
		require.NoError(t, err)
		require.Equal(t, byte(i), b[0])
		h := recv(t, accepted, "the host listener accepts")
		t.Cleanup(func() { h.Close() })
		pf.peers = append(pf.peers, c)
		pf.hosts = append(pf.hosts, h)
	}
	return pf
}

// parked waits until the relay holds no goroutine per flow: its host
// poller's one at most.
func (pf *parkedFlows) parked(t *testing.T) {
	t.Helper()
	// Polled here, not by require.Eventually, whose checks run in
	// goroutines of their own.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= pf.goroutines+1 {
			return
		}
	}
	t.Fatalf("goroutines: %d before %d flows, %d after they went idle", pf.goroutines, len(pf.peers), n)
}

func TestRelayIdleFlowsHoldNoGoroutine(t *testing.T) {
	const n = 64
	pf := openParked(t, n)
	pf.parked(t)
	require.Equal(t, int64(n), pf.e.fw.Stats().TCPFlows)

	// Parked flows wake either way: the host speaks first on half of
	// them (the host poller's wake-up), the peer on the other half (the
	// waiter queue's), each answered.
	for i := range n {
		first, second := pf.peers[i], pf.hosts[i]
		if i%2 == 0 {
			first, second = second, first
		}
		require.NoError(t, xfer.RoundTrip(first, second, []byte{'a', byte(i)}))
	}
	pf.parked(t)

	// Ends from parked flows cross: the peer's half-close reaches the
	// host as EOF and the host can still answer; the host's FIN reaches
	// the peer; a host reset reaches the peer as a reset.
	p, h := pf.peers[0], pf.hosts[0]
	require.NoError(t, p.(interface{ CloseWrite() error }).CloseWrite())
	h.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := h.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	_, err = h.Write([]byte("late"))
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(p, got)
	require.NoError(t, err)
	require.Equal(t, "late", string(got))
	require.NoError(t, h.Close())
	_, err = p.Read(got)
	require.ErrorIs(t, err, io.EOF)

	p, h = pf.peers[1], pf.hosts[1]
	h.(*net.TCPConn).SetLinger(0)
	require.NoError(t, h.Close())
	p.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = p.Read(got)
	require.ErrorContains(t, err, "reset")
	require.Eventually(t, func() bool { return pf.e.fw.Stats().TCPFlows == n-2 }, 10*time.Second, time.Millisecond)
	require.NotZero(t, pf.e.fw.Stats().TCPResets)
}

func TestRelayCloseAbortsParkedFlows(t *testing.T) {
	const n = 16
	pf := openParked(t, n)
	pf.parked(t)
	require.NoError(t, pf.e.fw.Close())
	st := pf.e.fw.Stats()
	require.Zero(t, st.TCPFlows)
	require.Zero(t, st.MemoryReserved)
	for i := range n {
		pf.peers[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := pf.peers[i].Read(make([]byte, 1))
		require.ErrorContains(t, err, "reset", "peer %d", i)
		pf.hosts[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = pf.hosts[i].Read(make([]byte, 1))
		require.ErrorContains(t, err, "reset", "host %d", i)
	}
}

func TestRelayShutdownWaitsForParkedFlows(t *testing.T) {
	const n = 8
	pf := openParked(t, n)
	pf.parked(t)
	shut := make(chan error, 1)
	go func() { shut <- pf.e.fw.Shutdown(context.Background()) }()
	// The flows end as their ends close them, Shutdown with the last.
	for i := range n {
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned with %d flows open: %v", n-i, err)
		default:
		}
		pf.peers[i].Close()
		pf.hosts[i].Close()
	}
	select {
	case err := <-shut:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return once every flow had ended")
	}
}

func TestRelayFlowsWakeAndExchange(t *testing.T) {
	// Parked, lingering and running directions, concurrently: each flow
	// trades messages with pauses around hostLinger (waking parked
	// directions and lingering ones), then a transfer each way at once
	// that fills the buffers on both sides and half-closes both ways.
	const n = 16
	size := int64(1 << 20)
	if raceEnabled {
		size = 256 << 10
	}
	pf := openParked(t, n)
	pf.parked(t)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			p, h := pf.peers[i], pf.hosts[i]
			for round := range 6 {
				time.Sleep(time.Duration(round%3) * hostLinger * 3 / 4)
				a, b := p, h
				if (i+round)%2 == 1 {
					a, b = h, p
				}
				msg := []byte{byte(i), byte(round), 'x'}
				if _, err := a.Write(msg); err != nil {
					errs <- fmt.Errorf("flow %d round %d: %w", i, round, err)
					return
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(b, got); err != nil || string(got) != string(msg) {
					errs <- fmt.Errorf("flow %d round %d: got %q, %v", i, round, got, err)
					return
				}
			}
			_, err := xfer.Exchange(p, h, size, xfer.Timeout(size))
			if err != nil {
				err = fmt.Errorf("flow %d: %w", i, err)
			}
			p.Close()
			h.Close()
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, recv(t, errs, "a flow's exchange ends"))
	}
	require.Eventually(t, func() bool { return pf.e.fw.Stats().TCPFlows == 0 }, 30*time.Second, time.Millisecond)
	st := pf.e.fw.Stats()
	// Each flow: its first byte, six 3-byte messages split both ways, and
	// the transfer, in each direction.
	require.Equal(t, uint64(n)*(1+9+uint64(size)), st.TCPBytesUp)
	require.Equal(t, uint64(n)*(1+9+uint64(size)), st.TCPBytesDown)
	require.Zero(t, st.TCPResets)
}

func TestRelayDownMessageSizes(t *testing.T) {
	// Host-to-peer messages around the runner's landing buffer: one that
	// fits (copied from it), one that fills it (the rest goes by
	// SIOCINQ), larger ones; each must arrive whole and in order, with
	// pauses so that the runner waits between them, then the host's FIN
	// and, the other way, the peer's answer after it.
	pf := openParked(t, 1)
	p, h := pf.peers[0], pf.hosts[0]
	sizes := []int{1, downLanding - 1, downLanding, downLanding + 1, 3 * downLanding, 200 << 10, 64}
	total := 0
	for i, n := range sizes {
		msg := make([]byte, n)
		for j := range msg {
			msg[j] = byte(i*31 + j*7)
		}
		_, err := h.Write(msg)
		require.NoError(t, err)
		got := make([]byte, n)
		_, err = io.ReadFull(p, got)
		require.NoError(t, err, "message %d (%d bytes)", i, n)
		require.Equal(t, msg, got, "message %d (%d bytes)", i, n)
		total += n
		if i%2 == 1 {
			time.Sleep(hostLinger / 10)
		}
	}
	require.NoError(t, h.(*net.TCPConn).CloseWrite())
	n, err := p.Read(make([]byte, 1))
	require.Equal(t, io.EOF, err, "read %d bytes after the host's FIN", n)
	_, err = p.Write([]byte("after"))
	require.NoError(t, err)
	got := make([]byte, 5)
	_, err = io.ReadFull(h, got)
	require.NoError(t, err)
	require.Equal(t, "after", string(got))
	p.Close()
	require.Eventually(t, func() bool { return pf.e.fw.Stats().TCPFlows == 0 }, 30*time.Second, time.Millisecond)
	st := pf.e.fw.Stats()
	require.Equal(t, uint64(1+total), st.TCPBytesDown)
	require.Equal(t, uint64(1+5), st.TCPBytesUp)
	require.Zero(t, st.TCPResets)
}

// BenchmarkRelayPingPong is a request/response exchange of 64 bytes
// through the relay to a host-loopback echo server: the relay's share of
// scripts/tun-rr.sh without the TUN device and the sandbox's kernel.
func BenchmarkRelayPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	go xfer.EchoStreams(ln)
	pol := &Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	e := newEnv(b, Relay(&net.Dialer{}, pol), nil)
	c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, uint16(ln.Addr().(*net.TCPAddr).Port)))
	require.NoError(b, err)
	defer c.Close()
	xfer.PingPong(b, c, 64)
}

// BenchmarkHostWriter is the up runner's write of one 64-byte message
// into a host socket (a loopback TCP conn whose far end drains it): the
// hostWriter gVisor's Read calls once per view.
func BenchmarkHostWriter(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(b, err)
	w := newHostWriter(rc)
	msg := make([]byte, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if n, err := w.Write(msg); err != nil || n != len(msg) {
			// A full socket (the drain fell behind): wait for room.
			require.ErrorIs(b, err, errWouldBlock)
			w.full = false
			time.Sleep(time.Millisecond)
		}
	}
	c.Close()
	recv(b, drained, "the drain ends")
}
