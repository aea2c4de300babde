package impair_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	addrA = netip.MustParseAddr("198.18.3.1")
	addrB = netip.MustParseAddr("198.18.3.2")
)

// hosts builds two stacks over a mem pair whose A side is wrapped.
func hosts(t *testing.T, opts impair.Options, mo *mem.Options, qdisc string) (a, b *stack.Stack, wrapped gstack.LinkEndpoint) {
	t.Helper()
	la, lb, err := mem.Pair(mo)
	require.NoError(t, err)
	w, err := impair.Wrap(la, opts)
	require.NoError(t, err)
	fast := stack.DefaultTCPOptions()
	fast.MinRTO = 10 * time.Millisecond
	for _, h := range []struct {
		st   **stack.Stack
		ep   gstack.LinkEndpoint
		addr netip.Addr
	}{{&a, w, addrA}, {&b, lb, addrB}} {
		s, err := stack.New(&stack.Options{TCP: &fast})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		*h.st = s
		id, err := s.AddNIC(h.ep, &stack.NICOptions{Qdisc: qdisc})
		require.NoError(t, err)
		require.NoError(t, s.AddAddress(id, netip.PrefixFrom(h.addr, 24)))
	}
	return a, b, w
}

func transfer(t *testing.T, a, b *stack.Stack, size int64) {
	t.Helper()
	ln, err := b.ListenTCP(netip.AddrPortFrom(addrB, 80))
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- [32]byte{}
			return
		}
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		got <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := a.DialTCP(ctx, netip.AddrPortFrom(addrB, 80))
	require.NoError(t, err)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>10)
	}
	_, err = c.Write(data)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	select {
	case s := <-got:
		require.Equal(t, sha256.Sum256(data), s, "the bytes arrived intact")
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
}

// TestTCPIntactThroughEveryFault wraps one side with every impairment in
// both directions (checksums on, so corruption is caught) and checks a
// transfer arrives intact, for each qdisc.
func TestTCPIntactThroughEveryFault(t *testing.T) {
	mo := mem.DefaultOptions()
	mo.ChecksumOffload = false
	for _, q := range sched.Names() {
		t.Run(q, func(t *testing.T) {
			opts := impair.Options{
				RX: link.Impairments{Loss: 0.03, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01, Delay: 100 * time.Microsecond, Seed: 1},
				TX: link.Impairments{Loss: 0.03, Duplicate: 0.02, Reorder: 0.02, Seed: 2},
			}
			a, b, w := hosts(t, opts, &mo, q)
			transfer(t, a, b, 2<<20)
			st := w.(link.Reporter).LinkStats()
			require.Positive(t, st.ImpairLost)
			require.Positive(t, st.ImpairDuplicated)
			require.Positive(t, st.ImpairReordered)
			require.Positive(t, st.ImpairCorrupted)
			require.Positive(t, st.ImpairDelayed)
		})
	}
}

func TestCorruptionDroppedWhenStackWouldNotCheck(t *testing.T) {
	// With checksum offload the stack verifies nothing: the wrapper drops
	// a corrupted packet instead of delivering it.
	opts := impair.Options{RX: link.Impairments{Corrupt: 0.2, Seed: 3}}
	a, b, w := hosts(t, opts, nil, sched.None)
	transfer(t, a, b, 1<<20)
	rx, _ := w.(interface {
		Counts() (impair.Counts, impair.Counts)
	}).Counts()
	require.Positive(t, rx.CorruptDropped)
	require.Zero(t, rx.Corrupted)
}

func TestUDPLossRate(t *testing.T) {
	opts := impair.Options{TX: link.Impairments{Loss: 0.25, Seed: 9}}
	a, b, _ := hosts(t, opts, nil, sched.None)
	srv, err := b.ListenUDP(netip.AddrPortFrom(addrB, 9))
	require.NoError(t, err)
	defer srv.Close()
	c, err := a.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(addrB, 9))
	require.NoError(t, err)
	defer c.Close()
	const n = 2000
	// Read while sending, so the receive buffer never overflows: only the
	// injected loss may take datagrams.
	counted := make(chan int)
	go func() {
		got := 0
		buf := make([]byte, 16)
		for {
			srv.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := srv.ReadFrom(buf); err != nil {
				counted <- got
				return
			}
			got++
		}
	}()
	for range n {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
		time.Sleep(10 * time.Microsecond)
	}
	got := <-counted
	require.InDelta(t, 0.75*n, got, 0.05*n, "a quarter lost")
}

func TestBadOptions(t *testing.T) {
	la, lb, err := mem.Pair(nil)
	require.NoError(t, err)
	defer la.Close()
	defer lb.Close()
	_, err = impair.Wrap(la, impair.Options{TX: link.Impairments{Corrupt: 0.1}})
	require.ErrorContains(t, err, "received packets only")
	_, err = impair.Wrap(la, impair.Options{RX: link.Impairments{Loss: 2}})
	require.Error(t, err)
	_, err = impair.Wrap(nil, impair.Options{})
	require.Error(t, err)
	w, err := impair.Wrap(la, impair.Options{})
	require.NoError(t, err)
	_, ok := w.(sched.WritableNotifier)
	require.True(t, ok, "mem signals writability, so the wrapper passes it on")
	w.Close()
	w.Close()
}
