package pcap_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/pcap"
)

// New wraps any endpoint before a stack gets it: here a linktest.Endpoint,
// into which the example injects what the wire would bring, with a
// linktest.Sink standing for the stack. A command would write to a file
// (os.Create) instead of a buffer, and hand the wrapper to
// stack.AddNIC.
func ExampleNew() {
	lower := linktest.NewEndpoint(nil)
	var file bytes.Buffer
	ep, err := pcap.New(lower, &file, nil) // nil: snap length 65535, a 2 MiB buffer
	if err != nil {
		log.Fatal(err)
	}
	ep.Attach(linktest.NewSink())
	packet := make([]byte, 100)
	packet[0] = 0x45 // IPv4; the capture records bytes, it parses nothing
	for range 3 {
		lower.Inject(packet)
	}
	// Close writes what is buffered and joins the writer goroutine; the
	// file is then whole (its writer stays the caller's to close).
	ep.Close()

	c := ep.Counts()
	fmt.Printf("link type %d, %d packets, %d bytes (24 of file header, 3 x (16 + 100)), %d dropped\n", ep.LinkType(), c.Packets, file.Len(), c.Dropped)
	// Output:
	// link type 101, 3 packets, 372 bytes (24 of file header, 3 x (16 + 100)), 0 dropped
}
