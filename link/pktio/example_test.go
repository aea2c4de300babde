package pktio_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/stack"
)

// Two stacks on pktio endpoints, with user code as the wire between
// them: it reads the packets one stack sends, in batches, and writes them
// into the other, as a VPN does through its tunnel.
func Example() {
	hosts := make([]*stack.Stack, 2)
	eps := make([]*pktio.Endpoint, 2)
	for i := range hosts {
		eps[i], _ = pktio.New(nil) // MTU 1420, GRO in, TSO cut on Read
		hosts[i], _ = stack.New(nil)
		defer hosts[i].Close() // closes the endpoint too
		nic, _ := hosts[i].AddNIC(eps[i], &stack.NICOptions{Qdisc: "llist"})
		hosts[i].AddAddress(nic, netip.MustParsePrefix(fmt.Sprintf("198.18.0.%d/24", i+1)))
	}
	wire := func(from, to *pktio.Endpoint) {
		bufs, sizes := make([][]byte, 64), make([]int, 64)
		for i := range bufs {
			bufs[i] = make([]byte, pktio.DefaultMTU)
		}
		for {
			n, err := from.Read(bufs, sizes, 0) // blocks; ErrClosed at Close
			if err != nil {
				return
			}
			for i := range n {
				bufs[i] = bufs[i][:sizes[i]]
			}
			to.Write(bufs[:n], 0)
			for i := range n {
				bufs[i] = bufs[i][:cap(bufs[i])]
			}
		}
	}
	go wire(eps[0], eps[1])
	go wire(eps[1], eps[0])

	server := netip.MustParseAddrPort("198.18.0.2:7")
	ln, _ := hosts[1].ListenTCP(server)
	defer ln.Close()
	go func() {
		c, _ := ln.Accept()
		c.Write([]byte("hello through pktio"))
		c.Close()
	}()
	c, err := hosts[0].DialTCP(context.Background(), server)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	msg, _ := io.ReadAll(c)
	fmt.Println(string(msg))
	// Output: hello through pktio
}
