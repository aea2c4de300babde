package stack_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// connPair returns a connected client and server conn of network ("tcp"
// or "udp", both connected) between two hosts with the given cache mode.
func connPair(t testing.TB, network string, mode stack.CacheMode) (c, s net.Conn) {
	t.Helper()
	p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{Cache: mode}})
	addr := netip.AddrPortFrom(stacktest.B4, 7)
	if network == "udp" {
		var err error
		s, err = p.B.DialUDP(addr, netip.AddrPortFrom(stacktest.A4, 8))
		require.NoError(t, err)
		c, err = p.A.DialUDP(netip.AddrPortFrom(stacktest.A4, 8), addr)
		require.NoError(t, err)
	} else {
		ln, err := p.B.ListenTCP(addr)
		require.NoError(t, err)
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			a, _ := ln.Accept()
			accepted <- a
		}()
		c, err = p.A.DialTCP(context.Background(), addr)
		require.NoError(t, err)
		s = <-accepted
		require.NotNil(t, s)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c, s
}

// TestConnCacheAddsNoAllocs: with the cache on, a conn's Write and Read
// allocate nothing beyond what gVisor's endpoint itself allocates for the
// same transfer (measured side by side on the same endpoints); with it
// off, gonet's per-call allocations show.
func TestConnCacheAddsNoAllocs(t *testing.T) {
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			msg, buf := []byte{1}, make([]byte, 64)
			roundTrip := func(c, s net.Conn) func() {
				return func() {
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
					if _, err := s.Read(buf); err != nil {
						t.Fatal(err)
					}
				}
			}
			c, s := connPair(t, network, stack.CacheOn)
			epC, epS := stack.EndpointOf(c), stack.EndpointOf(s)
			require.NotNil(t, epC)
			r, w := new(bytes.Reader), new(tcpip.SliceWriter)
			raw := func() {
				r.Reset(msg)
				if _, err := epC.Write(r, tcpip.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
				for {
					*w = buf
					if _, err := epS.Read(w, tcpip.ReadOptions{}); err == nil {
						return
					}
					runtime.Gosched()
				}
			}
			raw() // warm up both paths
			roundTrip(c, s)()
			endpoint := testing.AllocsPerRun(500, raw)
			on := testing.AllocsPerRun(500, roundTrip(c, s))

			c, s = connPair(t, network, stack.CacheOff)
			off := testing.AllocsPerRun(500, roundTrip(c, s))
			t.Logf("allocations per write and read: endpoint alone %.2f, conn with cache %.2f, without %.2f", endpoint, on, off)
			require.LessOrEqual(t, on, endpoint+0.2, "the cached conn allocates beyond gVisor's endpoint")
			require.GreaterOrEqual(t, off, on+1, "gonet's conn allocates per call")
		})
	}
}

func TestCacheModeString(t *testing.T) {
	require.Equal(t, "on", stack.CacheOn.String())
	require.Equal(t, "off", stack.CacheOff.String())
	require.Equal(t, stack.DefaultCache.String(), stack.CacheDefault.String())
}

// TestNetTestConnCacheOff: gonet's own conns, as handed out with the
// cache off, pass the same net.Conn suite as the cached ones (which the
// default runs).
func TestNetTestConnCacheOff(t *testing.T) {
	netTestConn(t, &stacktest.Options{Stack: &stack.Options{Cache: stack.CacheOff}})
}

// TestConnErrorsReportedOnce: an error the endpoint reports once (a UDP
// port unreachable, here) reaches the caller with the cache on as with
// it off, not swallowed by a retry through gonet, and translated
// (ECONNREFUSED) either way: UDP writes always go through the stack's
// socket, which waits for room.
func TestConnErrorsReportedOnce(t *testing.T) {
	var msgs []string
	for _, mode := range []stack.CacheMode{stack.CacheOff, stack.CacheOn} {
		p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{Cache: mode}})
		c, err := p.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(stacktest.B4, 9)) // nobody listens
		require.NoError(t, err)
		var werr error
		for i := 0; i < 1000 && werr == nil; i++ {
			_, werr = c.Write([]byte("x"))
			time.Sleep(time.Millisecond)
		}
		require.Error(t, werr, "the refusal is reported (cache %v)", mode)
		oe, ok := errors.AsType[*net.OpError](werr)
		require.True(t, ok, "a *net.OpError, as gonet's")
		msgs = append(msgs, oe.Op+" "+oe.Net)
		require.ErrorIs(t, werr, syscall.ECONNREFUSED, "cache %v", mode)
		c.Close()
	}
	require.Equal(t, msgs[0], msgs[1])
}
