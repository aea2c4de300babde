package bench

import (
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// Hosts of the in-process topology: 198.18.0.0/15 is reserved for
// benchmarking (RFC 2544).
var (
	clientAddr = netip.MustParseAddr("198.18.0.1")
	serverAddr = netip.MustParseAddr("198.18.0.2")
)

// topology is a client host and a server host joined by a link.
type topology struct {
	client, server         *stack.Stack
	clientNIC, serverNIC   tcpip.NICID
	clientLink, serverLink link.Reporter
}

// newTopology builds two hosts over the configured link, each NIC with the
// configured qdisc, so that both data and ACKs go through it.
func newTopology(c Config) (*topology, error) {
	if c.Link != "mem" {
		return nil, fmt.Errorf("link %q is not available", c.Link)
	}
	a, b, err := mem.Pair(c.Mem)
	if err != nil {
		return nil, err
	}
	t := &topology{clientLink: a, serverLink: b}
	for _, h := range []struct {
		st   **stack.Stack
		nic  *tcpip.NICID
		ep   *mem.Endpoint
		addr netip.Addr
	}{{&t.client, &t.clientNIC, a, clientAddr}, {&t.server, &t.serverNIC, b, serverAddr}} {
		// Senders must learn when the NIC refuses a datagram, so that
		// sent_pps counts what the stack took, not what it dropped at once.
		s, err := stack.New(&stack.Options{UDPRecvErr: true})
		if err != nil {
			t.close()
			return nil, err
		}
		*h.st = s
		id, err := s.AddNIC(h.ep, &stack.NICOptions{Qdisc: c.Qdisc, QdiscOptions: c.QdiscOptions})
		if err != nil {
			h.ep.Close()
			t.close()
			return nil, err
		}
		*h.nic = id
		if err := s.AddAddress(id, netip.PrefixFrom(h.addr, 24)); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t *topology) close() {
	for _, s := range []*stack.Stack{t.client, t.server} {
		if s != nil {
			s.Close()
		}
	}
	// An endpoint never handed to a stack is closed here; Close is
	// idempotent for those a stack already closed.
	for _, l := range []link.Reporter{t.clientLink, t.serverLink} {
		if c, ok := l.(interface{ Close() }); ok {
			c.Close()
		}
	}
}

// qdiscStats snapshots both hosts' qdisc counters, nil for a qdisc that
// keeps none.
func (t *topology) qdiscStats() (client, server *sched.Stats) {
	if s, ok := t.client.QdiscStats(t.clientNIC); ok {
		client = &s
	}
	if s, ok := t.server.QdiscStats(t.serverNIC); ok {
		server = &s
	}
	return client, server
}
