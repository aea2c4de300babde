package bench

import (
	"context"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/linkspec"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// host is one end of a benchmark: a ustack stack, or the Linux stack in a
// network namespace (Go's net, with sockets opened inside it).
type host interface {
	DialTCP(ctx context.Context, addr netip.AddrPort) (stack.TCPConn, error)
	ListenTCP(addr netip.AddrPort) (net.Listener, error)
	DialUDP(laddr, raddr netip.AddrPort) (net.Conn, error)
	ListenUDP(laddr netip.AddrPort) (net.PacketConn, error)
}

var _ host = (*stack.Stack)(nil)

// The in-process topology's addresses: 198.18.0.0/15 is reserved for
// benchmarking (RFC 2544).
var (
	memClient = netip.MustParseAddr("198.18.0.1")
	memServer = netip.MustParseAddr("198.18.0.2")
)

// topology is a client and a server joined by a link, with what the
// harness reads of it.
type topology struct {
	client, server host
	serverAddr     netip.Addr
	// counters of client-to-server traffic: packets the client's side of
	// the link sent, packets the server's side received, and packets the
	// wire lost on purpose (impairments).
	clientTX, serverRX, wireLost func() uint64
	// qdiscs snapshots the qdisc counters of the ustack ends (nil for a
	// kernel end or a qdisc that keeps none).
	qdiscs func() (client, server *sched.Stats)
	// polls snapshots the busy polling counters of the ustack ends (nil
	// for a kernel end).
	polls   func() (client, server *poll.Stats)
	closers []func()
}

func (t *topology) close() {
	for i := len(t.closers) - 1; i >= 0; i-- {
		t.closers[i]()
	}
}

// newTopology builds the configured link with a host on each end.
func newTopology(c Config) (*topology, error) {
	switch c.Link {
	case "mem":
		return memTopology(c)
	case LinkWG, LinkWGNetstack:
		return wgTopology(c)
	default:
		return deviceTopology(c)
	}
}

// ustackHost builds a stack on ep with the cell's qdisc and addr/prefix.
// The stack owns ep even on error.
func ustackHost(c Config, ep gstack.LinkEndpoint, addr netip.Prefix) (*stack.Stack, tcpip.NICID, error) {
	// Senders must learn when the NIC refuses a datagram, so that
	// sent_pps counts what the stack took, not what it dropped at once.
	s, err := stack.New(&stack.Options{UDPRecvErr: true, BusyPoll: c.BusyPoll, Cache: c.Cache, TCP: c.TCP})
	if err != nil {
		ep.Close()
		return nil, 0, err
	}
	id, err := s.AddNIC(ep, &stack.NICOptions{Qdisc: c.Qdisc, QdiscOptions: c.QdiscOptions})
	if err != nil {
		ep.Close()
		s.Close()
		return nil, 0, err
	}
	if err := s.AddAddress(id, addr); err != nil {
		s.Close()
		return nil, 0, err
	}
	return s, id, nil
}

// memTopology is two ustack hosts in this process over a mem pair, each
// NIC with the cell's qdisc, so that data and ACKs both go through one.
// With impairments, each host's endpoint is wrapped to impair what it
// receives (impair.OnReceive), so each direction of the wire has them.
func memTopology(c Config) (*topology, error) {
	a, b, err := linkspec.OpenPair(&linkspec.Options{Mem: c.Mem, Impair: c.Impair})
	if err != nil {
		return nil, err
	}
	faults, _ := b.(*impair.Endpoint) // the server's: client-to-server faults
	t := &topology{serverAddr: memServer}
	cs, cid, err := ustackHost(c, a, netip.PrefixFrom(memClient, 24))
	if err != nil {
		b.Close()
		return nil, err
	}
	t.closers = append(t.closers, func() { cs.Close() })
	ss, sid, err := ustackHost(c, b, netip.PrefixFrom(memServer, 24))
	if err != nil {
		t.close()
		return nil, err
	}
	t.closers = append(t.closers, func() { ss.Close() })
	t.client, t.server = cs, ss
	t.clientTX = linkCounter(a.(link.Reporter), func(st link.Stats) uint64 { return st.TXPackets })
	t.serverRX = linkCounter(b.(link.Reporter), func(st link.Stats) uint64 { return st.RXPackets })
	t.wireLost = func() uint64 { return 0 }
	if faults != nil {
		// The wire is the mem ring plus the wrapper: what reached the
		// server's stack is what the ring delivered (the wrapper reports
		// the ring's count), less what the wrapper lost or dropped, plus
		// its duplicates. The wrapper's counts are read first: the ring
		// counts a packet before the wrapper sees it, so the difference
		// never goes below zero.
		t.serverRX = func() uint64 {
			rx, _ := faults.Counts()
			return faults.LinkStats().RXPackets + rx.Duplicated - rx.Lost - rx.CorruptDropped - rx.Dropped.Total()
		}
		t.wireLost = func() uint64 { return faults.LinkStats().ImpairLost }
	}
	t.qdiscs = func() (*sched.Stats, *sched.Stats) { return qdiscOf(cs, cid), qdiscOf(ss, sid) }
	t.polls = func() (*poll.Stats, *poll.Stats) { return pollOf(cs), pollOf(ss) }
	return t, nil
}

func qdiscOf(s *stack.Stack, id tcpip.NICID) *sched.Stats {
	if st, ok := s.QdiscStats(id); ok {
		return &st
	}
	return nil
}

func pollOf(s *stack.Stack) *poll.Stats {
	st := s.BusyPollStats()
	return &st
}

func linkCounter(r link.Reporter, f func(link.Stats) uint64) func() uint64 {
	return func() uint64 { return f(r.LinkStats()) }
}

// noCache returns a device endpoint's NoCache option for the cell's cache
// setting: CacheDefault leaves the endpoint's own (given) setting.
func noCache(m stack.CacheMode, given bool) bool {
	switch m {
	case stack.CacheOn:
		return false
	case stack.CacheOff:
		return true
	}
	return given
}
