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
//   - link/linkspec: opening any of them from a spec such as afpacket:IF,
//     with faults, as the commands do.
//   - link/linktest: test doubles (dispatchers, writers, endpoints) for the
//     tests of every package that touches a link.
//
// link/vnet reads and writes the virtio-net header that afpacket and tun
// exchange with the kernel.
package link
