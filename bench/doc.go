// Package bench is ustack's in-process benchmark engine and its measuring
// instrument: it builds two ustack hosts joined by a link, runs a netperf
// style test between them, and reports what it cost.
//
// Tests:
//
//   - udp_stream: N sending goroutines, each with its own UDP socket and
//     receiving socket, send -size byte datagrams (120 by default, like
//     netperf -t UDP_STREAM -- -m 120) as fast as the stack takes them.
//   - tcp_stream: N TCP connections, each writing -size byte messages
//     (16 KiB by default, netperf's TCP_STREAM send size on Linux).
//   - tcp_rr, udp_rr: N sessions, each sending a -size byte request (1 by
//     default) and waiting for a response of the same size.
//
// Every result cell reports rates (sent_pps, recv_pps, gbps, tps), loss,
// and cost per operation: CPU (getrusage, both hosts, since both are this
// process), heap allocations and bytes (runtime/metrics), context switches
// (voluntary and not, for the measured window), and latency percentiles
// for the rr tests. An operation is a datagram sent (udp_stream: the cost
// of what the senders pushed, wherever it was lost), a received link packet (tcp_stream: a segment, or a super-segment with
// GSO) or a completed transaction (rr tests).
//
// What the rates count: for UDP tests, datagrams at the sockets (udp_stream
// counts only datagrams sent inside the measured window, so loss is exact,
// and its sockets report a full NIC queue as ENOBUFS, so that a datagram
// refused at once is retried rather than counted as sent);
// for TCP tests, packets on the link from client to server, since a TCP
// write is not a packet; gbps is application payload received.
//
// Measurement is honest by construction: every configuration gets fresh
// hosts, a warm-up before the window, and a drain after it; a run repeats
// its configurations in alternation (A B A B, never A A B B) so that a
// drifting machine biases no configuration, and reports per-field medians.
// Nothing here asserts a speed: compare configurations of one run, as
// ratios.
package bench
