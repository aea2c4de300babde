// Package linktest holds the link-layer test doubles every ustack package
// shares, so that each test does not grow its own (STYLE rule 1, after
// gVisor's link/channel and wireguard-go's tun/tuntest):
//
//   - Sink, a stack.NetworkDispatcher that records copies of what a link
//     delivers (and can hold references, as a socket queue does), and
//     Counter, one that only counts, for benchmarks;
//   - Writer, a stack.LinkWriter that takes, refuses or fails writes as a
//     test tells it and records what it took, and NotifyingWriter, the same
//     with a writability signal (sched.WritableNotifier);
//   - Endpoint, a raw-IP stack.LinkEndpoint over a Writer into which a test
//     injects received packets, with no optional interface, and Featured,
//     the same with every optional interface link/doc.go lists, each
//     call counted, to check that a wrapper passes them through.
//
// Users: the tests of link/mem (including its busy-poll tests),
// link/impair, link/pcap, link/internal/optional, link/tun, link/afpacket
// and sched. Package poll's own tests cannot use it, since it imports
// poll. The doubles are safe for concurrent use and hold no goroutine.
package linktest
