// Package stacktest builds pairs of connected ustack hosts for tests in
// any package: two stacks in one process over an in-memory NIC pair, with
// IPv4 and IPv6 addresses from the benchmarking and unique-local ranges.
// Faults come from wrapping the pair's endpoints (Options.WrapLink,
// Impaired), as they do everywhere else in ustack.
package stacktest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
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
	// WrapLink, if set, wraps each host's mem endpoint before its stack
	// gets it: side is "a" or "b". The wrapper owns the endpoint it is
	// given (it closes it), also when it returns an error. Impaired
	// returns one that injects faults.
	WrapLink func(side string, ep gstack.LinkEndpoint) (gstack.LinkEndpoint, error)
}

// Impaired returns a WrapLink that wraps each host's endpoint with package
// impair, impairing what it receives (impair.OnReceive: B is end 0, A end
// 1), so that each direction of the wire has im's faults. The wrappers'
// counters are in Pair.NICA and NICB (they implement link.Reporter), or
// Pair.LinkStats.
func Impaired(im link.Impairments) func(string, gstack.LinkEndpoint) (gstack.LinkEndpoint, error) {
	return func(side string, ep gstack.LinkEndpoint) (gstack.LinkEndpoint, error) {
		end := 0
		if side == "a" {
			end = 1
		}
		w, err := impair.Wrap(ep, impair.OnReceive(im, end))
		if err != nil {
			ep.Close()
			return nil, err
		}
		return w, nil
	}
}

// Pair is two hosts, A and B, connected by an in-memory link.
type Pair struct {
	A, B *stack.Stack
	// LinkA and LinkB are the mem pair's endpoints.
	LinkA, LinkB *mem.Endpoint
	// NICA and NICB are the endpoints the stacks were given: LinkA and
	// LinkB, or what WrapLink made of them.
	NICA, NICB gstack.LinkEndpoint
}

// LinkStats returns the counters of both NICs' endpoints (the wrappers'
// when WrapLink wrapped them), A's first; zero for one that keeps none.
func (p *Pair) LinkStats() (a, b link.Stats) {
	if r, ok := p.NICA.(link.Reporter); ok {
		a = r.LinkStats()
	}
	if r, ok := p.NICB.(link.Reporter); ok {
		b = r.LinkStats()
	}
	return a, b
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
	p := &Pair{LinkA: la, LinkB: lb, NICA: la, NICB: lb}
	ok := false
	defer func() {
		if !ok {
			p.Close()
			p.NICA.Close()
			p.NICB.Close()
		}
	}()
	if o.WrapLink != nil {
		for _, w := range []struct {
			nic  *gstack.LinkEndpoint
			name string
		}{{&p.NICA, "a"}, {&p.NICB, "b"}} {
			ep, err := o.WrapLink(w.name, *w.nic)
			if err != nil {
				return nil, err // the cleanup closes the endpoint again: Close is idempotent
			}
			*w.nic = ep
		}
	}
	for _, h := range []struct {
		st   **stack.Stack
		ep   gstack.LinkEndpoint
		name string
		v4   netip.Addr
		v6   netip.Addr
	}{{&p.A, p.NICA, "a", A4, A6}, {&p.B, p.NICB, "b", B4, B6}} {
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
