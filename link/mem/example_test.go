package mem_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"

	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/stack"
)

// Two userspace hosts in one process, each stack given one end of a mem
// pair: a wire with no kernel in the path and no privilege needed, which
// the tests and `ustack bench` run on.
func ExamplePair() {
	a, b, err := mem.Pair(nil) // nil: DefaultOptions, a 1500-byte MTU
	if err != nil {
		log.Fatal(err)
	}
	client := host(a, "198.18.0.1/24")
	defer client.Close() // closes a, and joins its receive goroutine
	server := host(b, "198.18.0.2/24")
	defer server.Close()

	pc, err := server.ListenUDP(netip.MustParseAddrPort("198.18.0.2:9"))
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	c, err := client.DialUDP(netip.AddrPort{}, netip.MustParseAddrPort("198.18.0.2:9"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello over mem")); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 100)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q from %v\n", buf[:n], from.(*net.UDPAddr).IP)

	// Each end counts what it carried: the datagram left through a and
	// was delivered by b's receive goroutine.
	fmt.Printf("a sent %d packet, b received %d\n", a.LinkStats().TXPackets, b.LinkStats().RXPackets)
	// Output:
	// "hello over mem" from 198.18.0.1
	// a sent 1 packet, b received 1
}

// host builds a stack on ep with one address. On success the stack owns
// ep; on failure it is closed here.
func host(ep *mem.Endpoint, addr string) *stack.Stack {
	st, err := stack.New(nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	nic, err := st.AddNIC(ep, nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	if err := st.AddAddress(nic, netip.MustParsePrefix(addr)); err != nil {
		log.Fatal(err)
	}
	return st
}
