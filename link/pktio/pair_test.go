package pktio_test

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/stack"
)

var (
	addrA  = netip.MustParseAddr("198.18.0.1")
	addrB  = netip.MustParseAddr("198.18.0.2")
	addrA6 = netip.MustParseAddr("fd00::1")
	addrB6 = netip.MustParseAddr("fd00::2")
)

// host is a stack on a pktio endpoint.
type host struct {
	s  *stack.Stack
	ep *pktio.Endpoint
}

func newHost(tb testing.TB, addr netip.Addr, opts *pktio.Options) host {
	tb.Helper()
	ep, err := pktio.New(opts)
	require.NoError(tb, err)
	s, err := stack.New(nil)
	require.NoError(tb, err)
	tb.Cleanup(func() { s.Close() })
	nic, err := s.AddNIC(ep, &stack.NICOptions{Qdisc: "llist"})
	require.NoError(tb, err)
	require.NoError(tb, s.AddAddress(nic, netip.PrefixFrom(addr, 24)))
	// The IPv6 address with the same last byte: fd00::1 or fd00::2.
	a6 := addrA6
	if addr == addrB {
		a6 = addrB6
	}
	require.NoError(tb, s.AddAddress(nic, netip.PrefixFrom(a6, 64)))
	return host{s: s, ep: ep}
}

// wire moves packets from one endpoint's Read to another's Write, the
// way a VPN moves them through its tunnel, with an optional look at each
// batch. It stops when either endpoint is closed; stop joins it.
type wire struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (w *wire) run(from, to *pktio.Endpoint, batch, offset int, inspect func(pkts [][]byte)) {
	w.runHeld(from, to, batch, offset, inspect, nil)
}

// runHeld is run with hold, if not nil, called before each Read: a test
// stops the wire by blocking in it.
func (w *wire) runHeld(from, to *pktio.Endpoint, batch, offset int, inspect func(pkts [][]byte), hold func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		bufs := make([][]byte, batch)
		for i := range bufs {
			bufs[i] = make([]byte, offset+pktio.GSOMaxSize+64)
		}
		sizes := make([]int, batch)
		out := make([][]byte, batch)
		for {
			if hold != nil {
				hold()
			}
			n, err := from.Read(bufs, sizes, offset)
			if err != nil {
				w.fail(err)
				return
			}
			for i := 0; i < n; i++ {
				out[i] = bufs[i][:offset+sizes[i]]
			}
			if inspect != nil {
				pkts := make([][]byte, n)
				for i := range pkts {
					pkts[i] = out[i][offset:]
				}
				inspect(pkts)
			}
			if _, err := to.Write(out[:n], offset); err != nil {
				w.fail(err)
				return
			}
		}
	}()
}

func (w *wire) fail(err error) {
	if errors.Is(err, os.ErrClosed) {
		return
	}
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// stop closes the endpoints (which ends the goroutines) and joins them.
func (w *wire) stop(tb testing.TB, eps ...*pktio.Endpoint) {
	for _, ep := range eps {
		ep.Close()
	}
	w.wg.Wait()
	require.NoError(tb, errors.Join(w.errs...))
}
