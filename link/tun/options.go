package tun

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

const (
	// DefaultMTU is Ethernet's, what a TUN device gets when created.
	DefaultMTU = 1500
	// MinMTU is the smallest MTU: IPv6 requires 1280 on every link, and a
	// smaller one would make IPv6 unusable on the device.
	MinMTU = header.IPv6MinimumMTU
	// MaxMTU is the largest MTU: 65520, the largest multiple of 16 under
	// 65535 (the largest IPv4 packet), which pasta uses for the same
	// purpose. With offloads a large MTU matters less, because TCP moves
	// 64 KiB super-segments at any MTU.
	MaxMTU = 65520
	// MaxQueues is the kernel's limit on the queues of one multi-queue TUN
	// device (MAX_TAP_QUEUES in drivers/net/tun.c).
	MaxQueues = 256
	// DefaultRXBatch is how many packets a receive goroutine reads and
	// delivers per wake-up before it goes round its loop again: 64 is
	// NAPI_POLL_WEIGHT, the per-poll budget of a Linux driver.
	DefaultRXBatch = 64
	// MaxRXBatch bounds RXBatch: a receive goroutine holds its queue's
	// descriptor for a whole batch, so Close waits for at most this many
	// deliveries. 1024 is well above any batch that measures better.
	MaxRXBatch = 1024
	// MaxNameLen is the longest interface name Linux takes (IFNAMSIZ - 1).
	MaxNameLen = 15
	// HostGSOMaxSize is the largest TCP super-segment the endpoint asks
	// gVisor for when the kernel negotiated TSO: 64 KiB, the kernel's
	// default gso_max_size for a device (GSO_LEGACY_MAX_SIZE), and what
	// gVisor's TCP keeps within an IPv4 total length. More would need BIG
	// TCP, which TUN does not offer.
	HostGSOMaxSize = 1 << 16
)

// Options configures Create, Open and OpenFD. A nil *Options means
// DefaultOptions; in a non-nil Options a zero Queues, MTU or RXBatch means
// its default, and an empty MAC a random one, while the booleans and Addrs
// are taken as they are.
//
// OpenFD adopts a device that something else created and configured, and
// uses no netlink: it refuses Addrs and Queues > 1, which only Open can
// honour, and ignores NoUp; MTU is then only what the endpoint reports to
// gVisor, which cannot learn the device's. Create reads only the options
// that shape the device (TAP, Queues, NoOffload, MTU, Addrs, NoUp,
// NoConfigure); the others are the endpoint's.
type Options struct {
	// TAP selects a TAP device (IFF_TAP), which carries Ethernet frames,
	// instead of a TUN device (IFF_TUN), which carries IP packets: what
	// rootless container tools hand their network helper (RootlessKit's
	// and Podman's tap0). Open and Create create or attach to a TAP
	// device, and OpenFD adopts one. The endpoint then carries whole
	// frames, and Ethernet returns it ready for a stack: gVisor's
	// Ethernet framing around it, with ARP and neighbour discovery.
	TAP bool
	// MAC is the link address of ustack's side of a TAP device: the
	// kernel's side has its own (the device's), and frames between the two
	// carry both. It must be a unicast Ethernet address; empty means a
	// random locally administered one, new for each endpoint. Only a TAP
	// device has one: with TAP false, MAC must be empty.
	MAC net.HardwareAddr
	// NoConfigure leaves the device's configuration to its creator, as
	// RootlessKit configures the tap0 it creates: Open and Create set no
	// MTU, add no address and leave the link state as it is (they touch
	// nothing but the device's descriptors), so Addrs must be empty and
	// NoUp has no effect. A zero MTU then means the device's own, read
	// through netlink.
	NoConfigure bool
	// Queues is the number of queues: one file descriptor and one receive
	// goroutine each. More than one opens the device with
	// IFF_MULTI_QUEUE, and an existing device must then be multi-queue too.
	// OpenFD adopts one descriptor, one queue: it refuses more.
	Queues int
	// NoOffload opens the device without the virtio-net header: no
	// checksum offload and no GSO in either direction, every checksum
	// computed and verified in software. For comparison and for kernels
	// that lack IFF_VNET_HDR. OpenFD cannot take the header off a
	// descriptor that has it: there NoOffload keeps the header (with
	// nothing in it but the kernel's checksum verdicts) and turns every
	// offload off.
	NoOffload bool
	// NoSoftwareGSO stops the endpoint from offering gVisor's software GSO
	// when the kernel did not negotiate TSO (or NoOffload is set). By
	// default it offers it: gVisor's TCP then builds a super-segment at a
	// time and cuts it into MTU-sized packets itself just before the link,
	// instead of building and checksumming every segment on its own. It
	// has no effect when TSO was negotiated. For comparison.
	NoSoftwareGSO bool
	// NoCache turns the queues' landing-buffer caches (package cache) off:
	// each queue then keeps its receive buffer (and its USO buffer, once
	// used) for its whole life, idle or not, as before the caches. For
	// comparison.
	NoCache bool
	// MTU is set on the device and reported by the endpoint, from MinMTU to
	// MaxMTU: the largest IP packet, Ethernet header not included on a TAP
	// device (as the kernel counts a device's MTU). With NoConfigure, zero
	// means the device's MTU. OpenFD does not set it on the device: give the MTU the
	// device was configured with (VpnService.Builder.setMtu's on Android),
	// or gVisor sends packets the kernel drops as too big (larger) or
	// wastes the link (smaller).
	MTU uint32
	// Addrs are assigned to the device for the kernel side (IPv6 ones with
	// duplicate address detection off, so they are usable at once). The
	// kernel adds the on-link routes for them. OpenFD refuses them: the
	// device's creator configures its addresses.
	Addrs []netip.Prefix
	// NoUp leaves the device down; by default Open brings it up. OpenFD
	// ignores it: it leaves the link state to the device's creator.
	NoUp bool
	// RXBatch is the most packets a receive goroutine reads and delivers
	// per wake-up, from 1 to MaxRXBatch.
	RXBatch int
	// NoGRO turns receive coalescing off: by default the TCP segments of
	// one receive round that continue each other climb gVisor's stack as
	// one (linkutil.GRO), which matters when the kernel hands over
	// MTU-sized segments (NoOffload, or a peer without TSO). Without the
	// virtio-net header GRO also makes the endpoint verify checksums
	// itself, as it does with the header. For comparison.
	NoGRO bool
	// NoTXRing writes every packet with its own writev(2). By default,
	// without the virtio-net header (where every packet is one write), a
	// queue writes a batch of packets with one io_uring_enter(2), as
	// linked writes that keep their order, where the kernel offers
	// io_uring (and writev where it does not, or once a seccomp filter
	// refuses it). For comparison.
	NoTXRing bool
	// NoRXRing reads every packet with its own read(2). By default,
	// without the virtio-net header, a receive round that finds more than
	// one packet waiting reads the next ones with one io_uring_enter(2)
	// per trip, as up to 64 reads into MTU-sized slots that land the
	// packets in order, where the kernel offers io_uring (and read(2)
	// where it does not, or once a seccomp filter refuses it). A round
	// that reads one packet at a time (request and response traffic)
	// keeps reading with read(2). For comparison.
	NoRXRing bool
}

// DefaultOptions returns the options a nil *Options stands for: a TUN
// device of one queue, offloads on, a 1500-byte MTU, no addresses, link
// up.
func DefaultOptions() Options {
	return Options{Queues: 1, MTU: DefaultMTU, RXBatch: DefaultRXBatch}
}

// normalize fills defaults into a copy of o and checks it. With
// NoConfigure a zero MTU stays zero, for Create to read the device's.
func (o *Options) normalize() (Options, error) {
	if o == nil {
		return DefaultOptions(), nil
	}
	r := *o
	r.Addrs = append([]netip.Prefix(nil), o.Addrs...)
	r.MAC = append(net.HardwareAddr(nil), o.MAC...)
	if r.Queues == 0 {
		r.Queues = 1
	}
	if r.MTU == 0 && !r.NoConfigure {
		r.MTU = DefaultMTU
	}
	if r.RXBatch == 0 {
		r.RXBatch = DefaultRXBatch
	}
	switch {
	case r.Queues < 1 || r.Queues > MaxQueues:
		return r, fmt.Errorf("tun: %d queues: must be from 1 to %d", r.Queues, MaxQueues)
	case r.MTU != 0 && (r.MTU < MinMTU || r.MTU > MaxMTU):
		return r, fmt.Errorf("tun: MTU %d: must be from %d to %d", r.MTU, MinMTU, MaxMTU)
	case r.RXBatch < 1 || r.RXBatch > MaxRXBatch:
		return r, fmt.Errorf("tun: RX batch %d: must be from 1 to %d", r.RXBatch, MaxRXBatch)
	case r.NoConfigure && len(r.Addrs) > 0:
		return r, fmt.Errorf("tun: Addrs %v with NoConfigure: the device's creator configures it; leave Addrs empty, or let Open configure the device", r.Addrs)
	case !r.TAP && len(r.MAC) > 0:
		return r, fmt.Errorf("tun: MAC %v: a TUN device carries IP packets and has no link address; set TAP for a TAP device, or leave MAC empty", r.MAC)
	}
	if r.TAP {
		mac, err := linkAddress(r.MAC)
		if err != nil {
			return r, err
		}
		r.MAC = mac
	}
	for _, p := range r.Addrs {
		switch {
		case !p.IsValid():
			return r, fmt.Errorf("tun: address %v: not a valid CIDR prefix", p)
		case p.Addr().Is4In6():
			return r, fmt.Errorf("tun: address %v: give IPv4 addresses in IPv4 form, not IPv4-mapped", p)
		}
	}
	return r, nil
}

// checkAdopted refuses the options that only Open can honour, for OpenFD
// adopting descriptor fd; o is normalized.
func checkAdopted(fd int, o *Options) error {
	switch {
	case fd < 0:
		return fmt.Errorf("tun: fd %d: not a file descriptor: pass the descriptor of an open TUN device", fd)
	case o.Queues != 1:
		return fmt.Errorf("tun fd %d: %d queues: OpenFD adopts one descriptor, which is one queue; leave Queues at 0 or 1 (Open opens several)", fd, o.Queues)
	case len(o.Addrs) > 0:
		return fmt.Errorf("tun fd %d: Addrs %v: OpenFD does not configure the device (it uses no netlink); leave Addrs empty and have the device's creator add them", fd, o.Addrs)
	}
	return nil
}

// linkAddress checks mac, a TAP endpoint's link address, or makes one if
// it is empty: random, with the locally administered bit set and the
// multicast bit clear, as the kernel's eth_random_addr makes a device's.
func linkAddress(mac net.HardwareAddr) (net.HardwareAddr, error) {
	if len(mac) == 0 {
		mac = make(net.HardwareAddr, header.EthernetAddressSize)
		rand.Read(mac) // never fails (crypto/rand)
		mac[0] = mac[0]&^0x01 | 0x02
		return mac, nil
	}
	switch a := tcpip.LinkAddress(mac); {
	case len(mac) != header.EthernetAddressSize:
		return nil, fmt.Errorf("tun: MAC %v: not an Ethernet address (%d bytes, not %d)", mac, len(mac), header.EthernetAddressSize)
	case header.IsMulticastEthernetAddress(a):
		return nil, fmt.Errorf("tun: MAC %v: a multicast (or broadcast) address; give a unicast one (first byte even)", mac)
	case a == header.UnspecifiedEthernetAddress:
		return nil, fmt.Errorf("tun: MAC %v: the unspecified address; give a unicast one, or leave MAC empty for a random one", mac)
	}
	return mac, nil
}

// checkName checks an interface name before it goes to the kernel. The
// empty name is allowed: the kernel then picks tunN.
func checkName(name string) error {
	switch {
	case len(name) > MaxNameLen:
		return fmt.Errorf("tun: interface name %q: longer than %d bytes", name, MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("tun: interface name %q: not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\x00"):
		return fmt.Errorf("tun: interface name %q: must not contain '/', ':', whitespace or NUL", name)
	}
	return nil
}

// Offloads says what the endpoint negotiated with the kernel.
type Offloads struct {
	// VNetHeader: every packet carries a virtio-net header
	// (IFF_VNET_HDR); false with Options.NoOffload.
	VNetHeader bool
	// Checksum: the kernel may hand over packets with partial checksums
	// (TUN_F_CSUM).
	Checksum bool
	// TSO4 and TSO6: the kernel may hand over TCP super-segments
	// (TUN_F_TSO4, TUN_F_TSO6), and the endpoint writes them (host GSO).
	TSO4, TSO6 bool
	// USO4 and USO6: the kernel may hand over UDP super-packets
	// (TUN_F_USO4, TUN_F_USO6; Linux 6.2 and later), which the endpoint
	// splits into datagrams.
	USO4, USO6 bool
	// Inherited: the kernel refused TUNSETOFFLOAD on a descriptor OpenFD
	// adopted (an LSM such as Android's SELinux policy may allow only
	// some ioctls), so the device keeps the offloads its creator set,
	// which cannot be read back. The receive path takes whatever the
	// virtio-net header announces (partial checksums, super-segments)
	// either way; Checksum, TSO and USO are false because the endpoint
	// cannot count on them, so it claims no host GSO.
	Inherited bool
}

// TSO reports whether TCP segmentation offload was negotiated for both IP
// versions: the condition for claiming host GSO, since gVisor's GSO
// capability is per NIC, not per protocol.
func (o Offloads) TSO() bool { return o.TSO4 && o.TSO6 }

// String lists the negotiated offloads, such as "vnet,csum,tso4,tso6", or
// "none"; "inherited" marks offloads left as the device's creator set them.
func (o Offloads) String() string {
	var parts []string
	for _, f := range []struct {
		on   bool
		name string
	}{{o.VNetHeader, "vnet"}, {o.Checksum, "csum"}, {o.TSO4, "tso4"}, {o.TSO6, "tso6"}, {o.USO4, "uso4"}, {o.USO6, "uso6"}, {o.Inherited, "inherited"}} {
		if f.on {
			parts = append(parts, f.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// OffloadStats counts what the offloads did, beyond link.Stats.
type OffloadStats struct {
	// TXSuperSegments counts TCP super-segments written for the kernel to
	// segment or take whole (each is one packet in TXPackets).
	TXSuperSegments uint64
	// RXSuperSegments counts TCP super-segments (the kernel's TSO or GRO
	// output) delivered whole to gVisor.
	RXSuperSegments uint64
	// RXUSOSplit counts UDP super-packets split into datagrams here;
	// RXUSODatagrams counts the datagrams they became (each of which is
	// one packet in RXPackets).
	RXUSOSplit, RXUSODatagrams uint64
}
