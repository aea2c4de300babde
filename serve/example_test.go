package serve_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"

	"github.com/ustack-dev/ustack/serve"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// Start runs the services on a stack the caller already has: here host B
// of an in-memory pair, which host A then talks to. `ustack serve` builds
// its stack on a device instead (serve.New), with the same services.
func ExampleStart() {
	p, err := stacktest.Build(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	// The services listen on the unspecified address of each family
	// given, so every address B has of that family answers.
	svc, err := serve.Start(p.B, []netip.Addr{netip.IPv4Unspecified()}, serve.Ports{Echo: 7}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Close stops the listeners and every connection, and waits for their
	// goroutines; it runs before the stacks close.
	defer svc.Close()

	c, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 7))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hello, echo"); err != nil {
		log.Fatal(err)
	}
	// Half-close: the echo service sends back everything, then closes.
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		log.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	// Output: hello, echo
}
