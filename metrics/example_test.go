package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// A command serves every counter of its stack to Prometheus: NewStack
// reads them fresh on each scrape, and Serve listens on a host (kernel)
// address, here loopback with a port the kernel picks.
func ExampleServe() {
	// Two hosts over an in-memory link; A pings B once, so A's gVisor
	// counters hold one echo request.
	p, err := stacktest.Build(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := p.A.Ping(context.Background(), stacktest.B4, nil); err != nil {
		log.Fatal(err)
	}

	srv, err := metrics.Serve("127.0.0.1:0", metrics.NewStack(p.A))
	if err != nil {
		log.Fatal(err)
	}
	// Close stops the server and joins its goroutine.
	defer srv.Close()

	// What a Prometheus scrape would read.
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `ustack_gvisor_total{counter="ICMP.V4.PacketsSent.EchoRequest"}`) {
			fmt.Println(sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// ustack_gvisor_total{counter="ICMP.V4.PacketsSent.EchoRequest"} 1
}
