package wgnet_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

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

// TestReadLimit checks the bound on each Read: at every MTU, ReadLimit
// of the largest transport messages wireguard-go makes fit in one UDP
// GSO datagram the kernel sends whole (with IPv6, UDP and Ethernet
// headers, under 64 KiB), and one more would not.
func TestReadLimit(t *testing.T) {
	const overhead = device.MessageTransportHeaderSize + 16 // header and Poly1305 tag
	const headers = 14 + 40 + 8
	for mtu := pktio.MinMTU; mtu <= pktio.MaxMTU; mtu++ {
		n := wgnet.ReadLimit(mtu)
		msg := mtu + overhead
		require.GreaterOrEqual(t, n, 1)
		require.GreaterOrEqual(t, (n+1)*msg+headers, 1<<16, "MTU %d: the limit could be higher", mtu)
		if n > 1 { // one message alone is no GSO send
			require.Less(t, n*msg+headers, 1<<16, "MTU %d", mtu)
		}
	}
	require.Equal(t, 45, wgnet.ReadLimit(testMTU))
}

// readCounter is a tun.Device that keeps the most packets one Read
// returned and the largest packet.
type readCounter struct {
	tun.Device
	most, largest atomic.Int64
}

func (r *readCounter) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := r.Device.Read(bufs, sizes, offset)
	for _, s := range sizes[:n] {
		if int64(s) > r.largest.Load() {
			r.largest.Store(int64(s))
		}
	}
	if int64(n) > r.most.Load() {
		r.most.Store(int64(n))
	}
	return n, err
}

// TestDeviceReads runs a bulk transfer through a tunnel and checks what
// wireguard-go got from each Read: TCP segments that fill the MTU, and
// never more than ReadLimit of them, although wireguard-go offers more
// buffers (its batch is 128).
func TestDeviceReads(t *testing.T) {
	a, _ := ustackSide(t, addrA, nil)
	b, _ := ustackSide(t, addrB, nil)
	ra := &readCounter{Device: a.tun}
	a.tun = ra
	join(t, a, b)
	c, s := connect(t, a, b, 5003)
	_, err := xfer.Exchange(c, s, transferSize, xfer.Timeout(transferSize))
	require.NoError(t, err)
	require.Equal(t, int64(testMTU), ra.largest.Load(), "the largest packet should fill the MTU")
	require.Equal(t, int64(wgnet.ReadLimit(testMTU)), ra.most.Load(), "the most packets one Read returned")
}
