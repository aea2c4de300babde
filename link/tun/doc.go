// Package tun is a link endpoint over a Linux TUN or TAP device: ustack on
// one side of the device, the kernel's own network stack on the other.
//
// Create creates the device (or attaches to an existing one of the same
// name and type, such as a persistent one) through /dev/net/tun, opens
// its descriptors, one per queue, and configures it through netlink (MTU,
// the kernel side's addresses, link up), or with Options.NoConfigure
// leaves its configuration to whoever created it. It returns the
// descriptors, so that a helper inside a user namespace can create the
// device there and pass one to a process outside. Open is Create and the
// endpoint over the descriptors, in place.
//
// OpenFD adopts instead the descriptor of a device that something else
// created and configured: the one Android's VpnService.establish returns,
// or one a privileged helper opened (Create) and passed over a unix socket
// (SCM_RIGHTS, as in the example). It needs no privilege and no netlink:
// it asks the device its name and flags (TUNGETIFF), uses the virtio-net
// header exactly when the descriptor has it, and takes what it cannot ask
// (the MTU) from Options. From there on both build the same endpoint
// through the same code.
//
// A name taken by a device of the other type, or by something that is not
// a TUN or TAP device at all, is refused with an error that says what the
// device is (the kernel's EINVAL alone does not), as is another user's
// device; the type is read through netlink, in the calling thread's
// namespace.
//
// # TUN and TAP
//
// A TUN device (the default) carries raw IP packets with no link header,
// like link/mem, so no link address resolution is needed, and the
// Endpoint goes into a stack as it is.
//
// A TAP device (Options.TAP) carries Ethernet frames: what rootless
// container tools hand their network helper (RootlessKit's tap0, or the
// one Podman has slirp4netns create). The kernel's side has the device's
// MAC; ustack's side has its own (Options.MAC, random by default). The
// Endpoint then carries whole frames, and Endpoint.Ethernet returns it as
// a stack takes it: inside gVisor's Ethernet endpoint (package
// link/ethernet), which frames what the stack sends and makes it resolve
// neighbours with ARP and NDP. The receive path parses each frame's
// Ethernet header itself (EtherType, and which host it is for: frames
// for another host and EtherTypes other than IPv4, IPv6 and ARP are
// dropped, counted in RXMalformed), so that GRO sees IP packets; the
// virtio-net header's offsets count the Ethernet header in both
// directions, so every offload below works on TAP as on TUN. The wrapper
// is transparent: every optional interface of the Endpoint (busy polling,
// writability, rounds, coalescing, the counters, Err, GSO) passes through
// it.
//
// # Offloads
//
// Unless Options.NoOffload is set, Open opens the device with IFF_VNET_HDR
// (OpenFD finds whether the descriptor has it):
// every packet in either direction carries a virtio-net header (package
// link/vnet), and TUNSETOFFLOAD tells the kernel what ustack can take:
// partial checksums (TUN_F_CSUM), TCP super-segments (TUN_F_TSO4/6), and,
// where the kernel knows them, UDP super-packets (TUN_F_USO4/6). Offloads
// reports what was negotiated. With TSO:
//
//   - TX: the endpoint claims host GSO, so gVisor's TCP hands it super-segments
//     of up to 64 KiB with a partial checksum, which are written whole behind
//     a header asking the kernel to segment them (or to take them whole into
//     its own TCP, as GRO would have built them).
//   - RX: the kernel hands over its TSO and GRO super-segments whole; gVisor
//     takes a TCP segment of any size, so they are delivered as they are.
//     UDP super-packets (USO) are split into datagrams here, because gVisor
//     would take one as a single oversized datagram: ustack splits in
//     userspace what the kernel no longer splits for it.
//   - Checksums: the endpoint claims RX checksum offload and does the
//     checking itself: packets the kernel vouches for (DATA_VALID, or a
//     partial checksum it generated) are delivered; the rest are verified
//     with vnet.Inspect and dropped if wrong (RXBadChecksum) or too
//     malformed to check (RXMalformed). It does not
//     claim TX checksum offload: gVisor computes the checksums of every
//     packet that is not a super-segment.
//
// With or without the header, the packets one receive round reads (up to
// Options.RXBatch, until the device is empty) go through GRO
// (linkutil.GRO) before the stack: TCP segments of one flow that continue
// each other climb it as one, and nothing is held past the round. Without
// the header that is what keeps MTU-sized traffic cheap (Options.NoGRO
// turns it off, for comparison).
//
// If the kernel refuses TSO (or with NoOffload), the endpoint does not
// claim host GSO and offers gVisor's software GSO instead (unless
// Options.NoSoftwareGSO): gVisor's TCP builds super-segments and cuts them
// itself, which saves per-segment work in TCP but still costs one write
// per segment. With NoOffload there is no header at all; the endpoint
// verifies every checksum itself for GRO's sake (or, with NoGRO, gVisor
// does).
// An adopted descriptor whose device's policy refuses TUNSETOFFLOAD keeps
// its creator's offloads (Offloads.Inherited): the receive path takes
// whatever the headers announce, and the endpoint claims no host GSO.
//
// # Queues and goroutines
//
// Each queue is one file descriptor (Options.Queues > 1 opens the device
// with IFF_MULTI_QUEUE). Each queue has one receive goroutine, started by
// the first Attach with a dispatcher: it reads up to a batch of packets
// with read(2) into a landing buffer it owns, copies each once into a
// right-sized pooled view, delivers it, and parks in Go's runtime poller
// (syscall.RawConn) when the queue is empty, so no OS thread blocks per
// queue. Without the virtio-net header, where every packet is one read, a
// round that finds more than one packet waiting reads the next ones
// through the queue's io_uring: trips of up to 64 reads, unlinked and
// with RWF_NOWAIT, which the kernel runs in order inside one
// io_uring_enter(2), each into its own MTU-sized slot of the landing
// buffer. A round's first trip asks for as many packets as the last round
// read, and a trip that comes back full asks for twice as many next, so a
// queue that receives one packet at a time still reads it with read(2),
// and a round ends at the trip that finds the queue empty. A packet larger
// than a slot (the device's MTU raised from outside) is lost, counted in
// RXErrors, and the slots grow (Options.NoRXRing turns the ring off;
// read(2) is used where the kernel has no io_uring, or once a seccomp
// filter refuses it). The landing buffers come from the queue's cache
// (package cache) and are parked with it, so an idle queue's are released
// (Options.NoCache keeps them for good). Transmit writes each packet with one writev(2) (header and the
// packet's views, no payload copy) to the queue its flow hashes to, so a
// flow stays on one queue and the kernel answers it on the same one.
// Without the virtio-net header, where every packet is one write, a batch
// goes in one io_uring_enter(2) instead, as linked writev requests that
// keep their order (Options.NoTXRing turns that off; writev is used where
// the kernel has no io_uring, or once a seccomp filter refuses it). A
// write the kernel refuses with EAGAIN is returned to the writer and
// signalled later through NotifyWritable by a per-queue watcher goroutine,
// started at the first refusal. (On TUN that is rare: the kernel takes a
// write into its own receive path synchronously, and refuses only when the
// device's send buffer, unlimited unless TUNSETSNDBUF lowered it, is
// full.) Close closes the descriptors, which wakes every parked goroutine,
// and joins them all.
//
// Closing the last descriptor of a device that Open created deletes it
// (the device is not made persistent; one made persistent beforehand,
// with ip tuntap add, outlives the endpoint). A device deleted from outside
// (ip link del, or netlink) fails reads and writes with EBADFD: receiving
// stops, writes fail, and Err reports it with an error matching
// link.ErrDeviceGone.
//
// Create and Open need CAP_NET_ADMIN over the network namespace (or to
// own the existing device); OpenFD needs only the descriptor. On systems
// other than Linux, all three return ErrNotSupported.
package tun
