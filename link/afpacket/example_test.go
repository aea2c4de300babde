package afpacket_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/netip"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// A ustack host on an existing Ethernet interface (here veth1, the end of
// a veth pair whose peer is in another namespace): the stack speaks
// Ethernet with its own addresses, and the kernel only carries frames.
// The interface itself is given none of the stack's addresses and IPv6
// off, or the kernel would answer ustack's traffic too.
//
// The example is compiled, not run: it needs CAP_NET_RAW and the
// interface.
func ExampleNew() {
	// Two queues: two sockets in one PACKET_FANOUT_HASH group, each flow
	// received on one of them, with one receive goroutine each.
	ep, err := afpacket.New("veth1", &afpacket.Options{Queues: 2})
	if err != nil {
		log.Fatal(err) // says what is missing: the interface, or the privilege
	}

	s, err := stack.New(nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	defer s.Close() // closes ep, and joins its receive goroutines
	// A qdisc of ours in front of the socket: a full socket is
	// backpressure the qdisc resumes from on the endpoint's signal.
	nic, err := s.AddNIC(ep, &stack.NICOptions{Name: "veth1", Qdisc: sched.LList})
	if err != nil {
		ep.Close() // on error ep is still ours
		log.Fatal(err)
	}
	if err := s.AddAddress(nic, netip.MustParsePrefix("198.18.1.2/24")); err != nil {
		log.Fatal(err)
	}
	if err := s.SetDefaultGateway(netip.MustParseAddr("198.18.1.1"), nic); err != nil {
		log.Fatal(err)
	}

	ln, err := s.Listen("tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "served by ustack")
	}))
	// Should the interface be deleted, the endpoint stops and says so:
	// it is to be closed, and opened again once the interface exists.
	if errors.Is(ep.Err(), link.ErrDeviceGone) {
		log.Printf("veth1 went away: %v", ep.Err())
	}
	log.Print(err)
}
