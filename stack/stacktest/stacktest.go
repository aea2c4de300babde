// Package stacktest builds pairs of connected ustack hosts for tests in
// any package: two stacks in one process over an in-memory NIC pair, with
// IPv4 and IPv6 addresses from the benchmarking and unique-local ranges.
package stacktest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/stack"
)

// The addresses of the two hosts: 198.18.0.0/15 is reserved for
// benchmarking (RFC 2544), fd00::/8 is unique-local.
var (
	A4 = netip.MustParseAddr("198.18.0.1")
	B4 = netip.MustParseAddr("198.18.0.2")
	A6 = netip.MustParseAddr("fd00::1")
	B6 = netip.MustParseAddr("fd00::2")
)

// Options configures New; nil means defaults everywhere.
type Options struct {
	// Mem configures the link; nil means mem.DefaultOptions.
	Mem *mem.Options
	// Qdisc names both NICs' queueing discipline; "" means none.
	Qdisc string
	// Stack configures both stacks; nil means defaults.
	Stack *stack.Options
}

// Pair is two hosts, A and B, connected by an in-memory link.
type Pair struct {
	A, B         *stack.Stack
	LinkA, LinkB *mem.Endpoint
}

// New builds a Pair and closes it when the test ends.
func New(tb testing.TB, opts *Options) *Pair {
	tb.Helper()
	p, err := Build(opts)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	return p
}

// Build builds a Pair; the caller must Close it.
func Build(opts *Options) (*Pair, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	la, lb, err := mem.Pair(o.Mem)
	if err != nil {
		return nil, err
	}
	p := &Pair{LinkA: la, LinkB: lb}
	ok := false
	defer func() {
		if !ok {
			p.Close()
			la.Close()
			lb.Close()
		}
	}()
	for _, h := range []struct {
		st   **stack.Stack
		ep   *mem.Endpoint
		name string
		v4   netip.Addr
		v6   netip.Addr
	}{{&p.A, la, "a", A4, A6}, {&p.B, lb, "b", B4, B6}} {
		s, err := stack.New(o.Stack)
		if err != nil {
			return nil, err
		}
		*h.st = s
		id, err := s.AddNIC(h.ep, &stack.NICOptions{Name: h.name, Qdisc: o.Qdisc})
		if err != nil {
			return nil, err
		}
		if err := s.AddAddress(id, netip.PrefixFrom(h.v4, 24)); err != nil {
			return nil, err
		}
		if err := s.AddAddress(id, netip.PrefixFrom(h.v6, 64)); err != nil {
			return nil, err
		}
	}
	ok = true
	return p, nil
}

// Close closes both hosts.
func (p *Pair) Close() {
	if p.A != nil {
		p.A.Close()
	}
	if p.B != nil {
		p.B.Close()
	}
}
