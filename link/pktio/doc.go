// Package pktio is a link endpoint whose wire is user code: the user
// writes the packets the stack is to receive and reads the packets the
// stack sends, in batches of [][]byte with an offset, the shape of
// wireguard-go's tun.Device. It is what a userspace VPN (wireguard-go and
// its embedders) puts under ustack in place of a TUN device.
//
// Inbound (Write), the TCP segments of a batch are coalesced by gVisor's
// own GRO engine (gvisor.dev/gvisor/pkg/tcpip/stack/gro, through the
// links' shared wiring, linkutil.GRO) before the stack sees them, so one
// large segment climbs the stack instead of dozens of small ones.
// Outbound (Read), the stack hands the endpoint TSO super-segments (it
// declares host GSO), which Read cuts into the caller's buffers,
// checksums included. Every packet Read hands out is at most the MTU,
// and every segment of a super-segment but its last is exactly the MTU:
// gVisor's own MSS reserves room for TCP options most segments do not
// carry (at a 1420-byte MTU its segments are 1392 bytes), and Read fills
// that room when the MTU is what bounds the connection. A consumer that
// takes super-packets (Options.VNetHeader) gets them whole behind a
// virtio-net header, as from a TUN with IFF_VNET_HDR.
//
// Write delivers in the writer's goroutine when no other delivery is in
// progress, as a qdisc bypasses an idle queue; otherwise it queues the
// packets for the endpoint's receive goroutine, which busy-polling
// readers (package poll) may also drive, and waits while that queue is
// full.
//
// The queue towards the consumer is bounded. When it is full the endpoint
// refuses the rest of a batch (counted in link.Stats.TXFull) and signals
// the qdisc once the consumer has made room (sched.WritableNotifier), so
// a consumer that stops reading slows the senders down and nothing is
// dropped uncounted.
package pktio
