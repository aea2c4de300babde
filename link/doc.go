// Package link holds what every ustack link endpoint shares: the counters
// each endpoint reports (Stats, Reporter), the error a device endpoint
// reports once its device is gone (ErrDeviceGone), the flow hash that
// multi-queue endpoints pick a queue by (FlowHash), the one test of a pure
// TCP ACK that receive offload and package stack's delayed ACK share
// (IsPureACK), and the faults the impair wrapper injects (Impairments). The bookkeeping the endpoints share
// and no user needs (attach and close, busy-polling gates, writability
// watchers) is in link/internal/linkutil.
//
// The endpoints themselves live in the sub-packages:
//
//   - link/mem: an in-memory NIC pair for in-process benchmarks and tests,
//     a plain wire with no faults of its own.
//   - link/afpacket: an AF_PACKET socket bound to an interface (veth in the
//     tests), with recvmmsg/sendmmsg batches, PACKET_VNET_HDR offloads and
//     PACKET_FANOUT queues.
//   - link/tun: a TUN device with IFF_VNET_HDR offloads (checksum, TSO,
//     USO) and IFF_MULTI_QUEUE queues, opened by name or adopted from a
//     descriptor (OpenFD).
//   - link/pktio: packets that user code (a userspace VPN) writes in and
//     reads out in batches, with GRO on the way in and GSO on the way out.
//   - link/impair: a wrapper that injects seeded faults around any of them,
//     the only fault injector, passing their optional interfaces through.
//   - link/pcap: a wrapper that captures what any of them receives and
//     sends into a pcap file (tcpdump -r, Wireshark), passing their optional
//     interfaces through.
//   - link/linkspec: opening any of them from a spec such as afpacket:IF,
//     with faults, as the commands do.
//   - link/linktest: test doubles (dispatchers, writers, endpoints) for the
//     tests of every package that touches a link.
//
// link/vnet reads and writes the virtio-net header that afpacket and tun
// exchange with the kernel.
//
// # Optional interfaces
//
// A link endpoint is a gVisor stack.LinkEndpoint. Beyond it, ustack and
// gVisor look for these optional interfaces by type assertion; an endpoint
// that lacks one simply goes without the feature:
//
//   - poll.Source: busy polling. A reader whose socket is empty runs one
//     bounded receive round of the link from its own goroutine. stack.AddNIC
//     registers it with the stack's poller. mem, afpacket, tun, pktio.
//   - sched.WritableNotifier: the writability signal. A link that refused a
//     write for lack of room calls the discipline back once it has room;
//     without it the discipline retries on a timer. Every sched discipline
//     registers when it is built. mem, afpacket, tun, pktio.
//   - sched.RoundNotifier: the round notifier. The link calls begin and end
//     around each receive round it delivers, so that what the delivery
//     writes (ACKs, replies) leaves in one flush at the round's end. Every
//     sched discipline registers when it is built. mem, afpacket, tun,
//     pktio.
//   - stack.GSOEndpoint: segmentation offload. gVisor's TCP hands the link
//     super-segments up to GSOMaxSize and of the kind SupportedGSO says
//     (GSONotSupported: none). gVisor's routes read it. mem, afpacket, tun,
//     pktio.
//   - Coalescer: the coalescer. A stack that forwards turns receive
//     coalescing (GRO, ACK thinning) off on every NIC with it (stack.AddNIC).
//     afpacket, tun, pktio.
//   - Reporter: the link's Stats. stack.Stats reads it for every NIC, and
//     through it the metrics exporter and the bench. mem, afpacket, tun, pktio.
//   - CacheReporter: the per-endpoint buffer caches' cache.Stats, for an
//     embedder and the endpoints' tests. afpacket, tun.
//   - ErrReporter: the device-gone error (Err, matching ErrDeviceGone), for
//     the endpoint's owner to close and reopen it. afpacket, tun.
//
// A wrapper endpoint (link/impair, link/pcap) is transparent (STYLE rule
// 17): it implements every one of them and passes each call through to
// the endpoint it wraps, or, where that endpoint lacks it, answers as an
// endpoint without the feature would (no GSO, nothing to poll, no round
// hooks called, zero counters, no error); the writability signal, which
// a discipline waits for once offered, then comes from a timer. The
// wrappers share one implementation of this (link/internal/linkutil's
// Passthrough), and a test checks every wrapper in the tree against the
// list above, which link/internal/optional holds in machine-readable form.
package link
