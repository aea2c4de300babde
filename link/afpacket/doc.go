// Package afpacket is a link endpoint on an AF_PACKET socket bound to one
// network interface by name: any Ethernet interface, a veth end in the
// tests. The stack above it speaks Ethernet (with ARP and NDP), and the
// kernel below it carries the frames to and from the interface.
//
// What it owns, end to end:
//
//   - RX (Options.RX = RXSlotRing, the default): a TPACKET_V2 ring
//     (PACKET_MMAP) per queue, one frame per slot, which the kernel hands
//     over frame by frame with a wake-up, as a socket's data. One
//     goroutine per queue copies each frame once from its slot into a
//     right-sized pooled gVisor view and delivers it, up to RXBatch slots
//     a round, and parks in Go's netpoller (syscall.RawConn) when the ring
//     is empty, so no OS thread blocks per queue, and Close wakes it. A
//     wake that finds a frame costs no system call, and neither does
//     parking again after it: a request-response exchange receives with
//     none. Frames too large for a slot (slots are sized for the MTU; a
//     veth peer's TSO super-packets are not) are queued on the socket
//     whole (PACKET_COPY_THRESH) and read with recvmmsg, a run of them per
//     call, in ring order.
//   - RX with RXRecvmmsg: the goroutine reads batches with recvmmsg into
//     landing buffers the endpoint owns and reuses. The landing batch
//     (also the slot ring's, for its large frames) comes from the queue's
//     cache (package cache), parked with it, so an idle queue's batch is
//     released (Options.NoCache keeps it for good). The TCP segments of
//     each round that continue each other are coalesced (GRO,
//     linkutil.GRO) before they climb the stack, and nothing is held past
//     the round; without the virtio-net header the endpoint then checks
//     the checksums itself.
//   - RX with Options.RX = RXRing: a TPACKET_V3 ring (PACKET_MMAP) per
//     queue instead, which the kernel fills and hands over a 128 KiB block
//     at a time; a block is one round. A busy queue receives without a
//     system call, but a block is handed over only when full or after
//     1 ms, which a request-response exchange pays on every message: on a
//     veth, tcp_rr fell from 23-36k to about 700 transactions a second, and
//     a stream's ACKs arrive late enough to slow it. So it is not the
//     default.
//   - TX: WritePackets sends a whole batch with one sendmmsg, the packets'
//     own views as iovecs (no payload copy), its message headers built in
//     scratch from the endpoint's cache. A full socket is backpressure:
//     the rest of the batch goes back to the writer with ErrNoBufferSpace,
//     and the endpoint signals (sched.WritableNotifier) when the socket can
//     take more.
//   - Offloads through the virtio-net header (PACKET_VNET_HDR, on by
//     default): gVisor's TCP hands the endpoint 64 KiB super-segments with
//     a partial checksum that the kernel completes and segments (or, on a
//     veth, carries whole to the peer); received frames carry the kernel's
//     checksum verdict, and received super-packets (GRO, or a veth peer's
//     TSO) go to gVisor whole.
//   - Queues: with Options.Queues > 1 the endpoint opens that many sockets
//     in one PACKET_FANOUT_HASH group, so each flow is received on one
//     queue, and sends each flow from one socket chosen by a hash of its
//     addresses and ports.
//
// Every packet is counted in link.Stats (LinkStats, per queue in
// QueueStats). A device that goes away (the interface is deleted) stops the
// endpoint: Err reports it with an error matching link.ErrDeviceGone, and
// WritePackets fails.
//
// The endpoint uses the interface's own MAC address, so the interface's
// unicast filter passes ustack's frames, and puts the interface in
// all-multicast mode while it is open (gVisor's IPv6 joins groups the
// kernel does not know). The kernel in the interface's namespace still
// receives every frame: give that interface none of the stack's addresses
// (and disable IPv6 on it), or the kernel answers ustack's traffic too,
// with resets and unreachables. VLAN tags are not handled.
//
// AF_PACKET needs CAP_NET_RAW (SO_SNDBUFFORCE and SO_RCVBUFFORCE also want
// CAP_NET_ADMIN; without it the buffers are capped by net.core.wmem_max
// and rmem_max). The endpoint exists on Linux only; elsewhere New returns
// ErrNotSupported.
package afpacket
