package pktio_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/link/vnet"
)

// connect listens on b, dials it from a and returns both ends.
func connect(t *testing.T, a, b host, port uint16) (net.Conn, net.Conn) {
	return connectTo(t, a, b, addrB, port)
}

// connectTo is connect to b's address server.
func connectTo(t *testing.T, a, b host, server netip.Addr, port uint16) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := b.s.ListenTCP(netip.AddrPortFrom(server, port))
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := a.s.DialTCP(ctx, netip.AddrPortFrom(server, port))
	require.NoError(t, err)
	s := <-accepted
	require.NotNil(t, s)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// checkSegments fails (through bad) unless every packet is at most mtu
// bytes with right IP and TCP checksums, and keeps the size of the
// largest in largest.
func checkSegments(mtu int, bad *atomic.Value, largest *atomic.Int64) func([][]byte) {
	return func(pkts [][]byte) {
		for _, p := range pkts {
			if len(p) > mtu {
				bad.CompareAndSwap(nil, errors.New("packet larger than the MTU"))
			}
			if v := vnet.CheckIP(p); v != vnet.Verified {
				bad.CompareAndSwap(nil, errors.New("packet with a wrong checksum or malformed"))
			}
			for n := int64(len(p)); n > largest.Load(); {
				largest.CompareAndSwap(largest.Load(), n)
			}
		}
	}
}

func TestTransfer(t *testing.T) {
	const size = 16 << 20
	for _, tc := range []struct {
		name   string
		opts   pktio.Options
		server netip.Addr
	}{
		{"gro+gso", pktio.Options{}, addrB},
		{"gro+gso-ipv6", pktio.Options{}, addrB6},
		{"no-gro", pktio.Options{NoGRO: true}, addrB},
		{"no-gso", pktio.Options{NoGSO: true}, addrB},
		{"vnet", pktio.Options{VNetHeader: true}, addrB},
		{"vnet-ipv6", pktio.Options{VNetHeader: true}, addrB6},
		{"small-batch", pktio.Options{BatchSize: 3, QueueLen: 16}, addrB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newHost(t, addrA, &tc.opts)
			b := newHost(t, addrB, &tc.opts)
			var bad atomic.Value
			var largest atomic.Int64
			inspect := checkSegments(pktio.DefaultMTU, &bad, &largest)
			if tc.opts.VNetHeader {
				inspect = func(pkts [][]byte) {
					for _, p := range pkts {
						h, err := vnet.Decode(p)
						if err == nil {
							err = h.Check(len(p) - vnet.HeaderSize)
						}
						if err != nil {
							bad.CompareAndSwap(nil, err)
						}
					}
				}
			}
			var w wire
			// wireguard-go's offset: room for its transport header.
			w.run(a.ep, b.ep, 128, 16, inspect)
			w.run(b.ep, a.ep, 128, 16, inspect)
			c, s := connectTo(t, a, b, tc.server, 5001)
			_, err := xfer.Exchange(c, s, size, xfer.Timeout(size))
			require.NoError(t, err)
			w.stop(t, a.ep, b.ep)
			require.Nil(t, bad.Load())
			if !tc.opts.NoGSO && !tc.opts.VNetHeader {
				// gVisor's TCP reserves room for options its segments
				// mostly do not carry: Read fills it.
				require.Equal(t, int64(pktio.DefaultMTU), largest.Load(), "the largest packet should fill the MTU")
			}
			for _, ep := range []*pktio.Endpoint{a.ep, b.ep} {
				st, ct := ep.LinkStats(), ep.Counters()
				require.Zero(t, st.TXErrors+st.RXErrors+st.RXMalformed)
				if !tc.opts.NoGSO && !tc.opts.VNetHeader {
					require.NotZero(t, ct.ReadSplit, "TSO super-segments should have been cut")
				}
				if tc.opts.VNetHeader {
					require.NotZero(t, ct.RXSuper, "super-packets should have gone whole")
				}
			}
		})
	}
}

// TestBackpressure stops reading one endpoint: its queue fills, the
// refusals are counted, the sender blocks rather than loses anything, and
// once reading resumes every byte arrives.
func TestBackpressure(t *testing.T) {
	// The queue is shorter than what TCP puts in flight at once (an initial
	// window of 10 segments each way, and the ACKs): it fills at once, not
	// only after retransmission timeouts add one packet at a time (a queue
	// of 32 filled only after 6-25 s of RTO back-off, or never in 30 s).
	const size, queue = 8 << 20, 8
	opts := &pktio.Options{QueueLen: queue, NoGSO: true}
	a := newHost(t, addrA, opts)
	b := newHost(t, addrB, opts)
	var w wire
	var paused atomic.Bool
	resume := make(chan struct{})
	w.run(b.ep, a.ep, 64, 0, nil)
	w.runHeld(a.ep, b.ep, 64, 0, nil, func() {
		if paused.Load() {
			<-resume
		}
	})
	c, s := connect(t, a, b, 5002)
	// From the next Read on, nothing reads a's endpoint: its queue fills
	// and stays full.
	paused.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := xfer.Exchange(c, s, size, xfer.Timeout(size))
		done <- err
	}()
	// Then TCP keeps the qdisc trying, and the link refuses.
	require.Eventually(t, func() bool { return a.ep.Backlog() == queue && a.ep.LinkStats().TXFull > 0 },
		30*time.Second, time.Millisecond, "the queue towards the consumer never filled")
	close(resume)
	require.NoError(t, <-done)
	w.stop(t, a.ep, b.ep)
	st, ct := a.ep.LinkStats(), a.ep.Counters()
	// Every packet the endpoint accepted was read, or released at Close
	// and counted there.
	require.LessOrEqual(t, ct.ReadPackets, st.TXPackets)
	require.LessOrEqual(t, st.TXPackets-ct.ReadPackets, st.TXClosed)
	qs, ok := a.s.QdiscStats(1)
	require.True(t, ok)
	require.NotZero(t, qs.Requeued, "the qdisc should have requeued what the full link refused")
}

func TestCloseWakesReader(t *testing.T) {
	ep, err := pktio.New(nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, 2048)}
		_, err := ep.Read(bufs, make([]int, 1), 0)
		errc <- err
	}()
	require.Eventually(t, func() bool { return pktio.BlockedReads(ep) == 1 }, 10*time.Second, time.Millisecond, "Read never blocked")
	ep.Close()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Close did not wake the blocked Read")
	}
	require.ErrorIs(t, err, os.ErrClosed)
	require.ErrorIs(t, err, pktio.ErrClosed)
	_, err = ep.Write([][]byte{make([]byte, 40)}, 0)
	require.ErrorIs(t, err, os.ErrClosed)
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []pktio.Options{{MTU: 100}, {QueueLen: -1}, {BatchSize: -2}} {
		_, err := pktio.New(&o)
		require.Error(t, err)
	}
}
