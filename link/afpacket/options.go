package afpacket

import (
	"errors"
	"fmt"
)

const (
	// DefaultBatch is the most packets one recvmmsg reads or one sendmmsg
	// sends: 64 is NAPI_POLL_WEIGHT, the per-poll budget of a Linux driver,
	// and the qdisc's dequeue batch (sched.DefaultBatch), so one qdisc run
	// becomes one system call.
	DefaultBatch = 64
	// MaxBatch is the largest RXBatch and TXBatch: the kernel caps the
	// messages of one recvmmsg or sendmmsg at UIO_MAXIOV (1024).
	MaxBatch = 1024
	// MaxQueues is the most sockets one endpoint opens: 256 was the fixed
	// member limit of a fanout group (PACKET_FANOUT_MAX) before Linux 6.1
	// made it configurable, and each queue costs a goroutine and RXBatch
	// landing buffers of 64 KiB.
	MaxQueues = 256
	// DefaultRcvBuf is each socket's receive buffer in bytes. Linux's
	// default (net.core.rmem_default, 208 KiB) holds three 64 KiB GRO
	// packets, so one scheduling delay of the RX goroutine drops a burst;
	// 4 MiB is about 3 ms of 10 Gbit/s traffic and the size gVisor's TCP
	// window reaches in these tests.
	DefaultRcvBuf = 4 << 20
	// MinRcvBuf is the smallest RcvBuf: two full-size (64 KiB) packets, so
	// that a GRO packet can always be queued.
	MinRcvBuf = 128 << 10
	// DefaultSndBuf is each socket's send buffer in bytes: what the kernel
	// may hold of ours before sendmmsg refuses more. On a veth it hardly
	// matters (veth releases a frame as it forwards it); behind a real
	// device's queue, 1 MiB (16 super-segments, about 1 ms at 10 Gbit/s)
	// keeps the device busy while the rest waits in our qdisc, where
	// ordering and fairness are ours (BQL's reasoning), instead of in a
	// kernel buffer we do not control.
	DefaultSndBuf = 1 << 20
	// ifNameMax is the longest interface name Linux accepts (IFNAMSIZ-1).
	ifNameMax = 15
)

// RXMode is how a queue receives frames from its socket.
type RXMode uint8

const (
	// RXDefault stands for the default mode, RXSlotRing.
	RXDefault RXMode = iota
	// RXRecvmmsg copies up to RXBatch frames with one recvmmsg into the
	// queue's landing buffers, and parks in the runtime poller when the
	// socket is empty. A frame reaches the stack as soon as it is read.
	// It was the default before RXSlotRing, which saves the recvmmsg of
	// every wake.
	RXRecvmmsg
	// RXRing maps a TPACKET_V3 receive ring (PACKET_MMAP) of RcvBuf
	// bytes, in blocks of 128 KiB: the kernel writes frames straight into
	// it and hands over a block at a time, so a busy queue receives with
	// no system call at all. But a block is handed over only when full or
	// after 1 ms, so on a quiet link every frame waits up to 1 ms: a
	// request-response exchange becomes that much slower.
	RXRing
	// RXSlotRing maps a TPACKET_V2 receive ring of about RcvBuf bytes,
	// in slots sized for the interface's MTU: the kernel writes each
	// frame straight into the next slot and hands it over at once, waking
	// the queue as a socket would. A queue that finds a frame waiting when
	// it wakes reads it with no system call, and parks again with none, so
	// a request-response exchange costs no receive call at all. A frame
	// larger than a slot (a super-packet of the peer's TSO) is queued on
	// the socket whole and read with recvmmsg, in order, a run of them
	// per call. The ring's memory (RcvBuf bytes per queue) is the
	// kernel's, held while the endpoint is open. The default.
	RXSlotRing
)

// String returns the mode's name: "default", "recvmmsg", "ring" or
// "slotring".
func (m RXMode) String() string {
	switch m {
	case RXDefault:
		return "default"
	case RXRecvmmsg:
		return "recvmmsg"
	case RXRing:
		return "ring"
	case RXSlotRing:
		return "slotring"
	}
	return fmt.Sprintf("RXMode(%d)", uint8(m))
}

// Options configures New. A nil *Options means DefaultOptions; in a
// non-nil Options a zero number means its default and the booleans are
// taken as they are.
type Options struct {
	// Queues is how many sockets (and RX goroutines) to open. More than one
	// joins them in a PACKET_FANOUT_HASH group: the kernel spreads received
	// flows over them by hash, each flow on one queue, and transmit picks a
	// socket by a hash of each packet's addresses and ports. Default 1.
	Queues int
	// QdiscBypass sets PACKET_QDISC_BYPASS: frames go straight to the
	// driver, skipping the interface's kernel qdisc (and its drops and
	// shaping). Off by default: with it on, a full device drops instead of
	// pushing back.
	QdiscBypass bool
	// NoOffload turns the kernel offloads off by leaving the virtio-net
	// header (PACKET_VNET_HDR) off: no kernel GSO (the endpoint cuts
	// gVisor's TCP super-segments into MTU-sized frames itself, see
	// SupportedGSO) and every transmitted checksum computed in software
	// (by gVisor, or by the endpoint for the frames it cuts). It exists to measure what the offloads
	// are worth. The kernel still hands over frames with partial checksums
	// (a veth peer's, say); without the header the endpoint learns of them
	// through PACKET_AUXDATA, and trusts them (GRO on, when the endpoint
	// verifies the others itself) or completes them for gVisor (NoGRO).
	NoOffload bool
	// NoSoftwareGSO turns segmentation off where the endpoint would do it
	// itself (NoOffload): gVisor's TCP then builds and checksums every
	// MTU-sized segment on its own instead of a super-segment at a time.
	// For comparison.
	NoSoftwareGSO bool
	// NoGRO turns receive coalescing off: by default the TCP segments of
	// one receive round that continue each other climb gVisor's stack as
	// one (linkutil.GRO), which matters when the kernel hands over
	// MTU-sized segments (NoOffload, or a peer without TSO). Without the
	// virtio-net header GRO also makes the endpoint verify checksums
	// itself (it claims RX checksum offload, as with the header) instead
	// of completing partial ones for gVisor. For comparison.
	NoGRO bool
	// RX is how the queues receive: RXSlotRing, RXRecvmmsg or RXRing;
	// RXDefault (the zero value) means RXSlotRing.
	RX RXMode
	// RXBatch is the most frames one receive round takes: one recvmmsg,
	// or the slots of one slot-ring round. Default DefaultBatch, at most
	// MaxBatch. Each costs a 64 KiB landing buffer per queue (with the
	// slot ring, taken only while frames too large for a slot arrive).
	RXBatch int
	// TXBatch is the most frames one sendmmsg sends. Default DefaultBatch,
	// at most MaxBatch; 1 sends every packet with its own system call, for
	// comparison.
	TXBatch int
	// NoCache turns the endpoint's buffer caches (package cache) off: TX
	// scratch then comes from a sync.Pool, emptied by the garbage
	// collector, and each queue keeps its landing batch for its whole life,
	// idle or not, as before the caches. For comparison.
	NoCache bool
	// SndBuf and RcvBuf are each socket's send and receive buffer sizes in
	// bytes, set with SO_SNDBUFFORCE and SO_RCVBUFFORCE (the kernel doubles
	// them for its bookkeeping). Defaults DefaultSndBuf and DefaultRcvBuf;
	// RcvBuf is at least MinRcvBuf.
	SndBuf, RcvBuf int
}

// DefaultOptions returns what a nil *Options stands for: one queue
// receiving on a slot ring, the virtio-net header on, no qdisc bypass,
// batches of DefaultBatch.
func DefaultOptions() Options {
	return Options{
		Queues:  1,
		RX:      RXSlotRing,
		RXBatch: DefaultBatch,
		TXBatch: DefaultBatch,
		SndBuf:  DefaultSndBuf,
		RcvBuf:  DefaultRcvBuf,
	}
}

// normalize fills defaults into a copy of o and checks it.
func (o *Options) normalize() (Options, error) {
	if o == nil {
		return DefaultOptions(), nil
	}
	r := *o
	d := DefaultOptions()
	if r.Queues == 0 {
		r.Queues = d.Queues
	}
	if r.RX == RXDefault {
		r.RX = d.RX
	}
	if r.RXBatch == 0 {
		r.RXBatch = d.RXBatch
	}
	if r.TXBatch == 0 {
		r.TXBatch = d.TXBatch
	}
	if r.SndBuf == 0 {
		r.SndBuf = d.SndBuf
	}
	if r.RcvBuf == 0 {
		r.RcvBuf = d.RcvBuf
	}
	switch {
	case r.RX > RXSlotRing:
		return r, fmt.Errorf("afpacket: %v: not a receive mode; use RXRecvmmsg, RXRing or RXSlotRing", r.RX)
	case r.Queues < 1 || r.Queues > MaxQueues:
		return r, fmt.Errorf("afpacket: %d queues: must be from 1 to %d", r.Queues, MaxQueues)
	case r.RXBatch < 1 || r.RXBatch > MaxBatch:
		return r, fmt.Errorf("afpacket: RX batch %d: must be from 1 to %d", r.RXBatch, MaxBatch)
	case r.TXBatch < 1 || r.TXBatch > MaxBatch:
		return r, fmt.Errorf("afpacket: TX batch %d: must be from 1 to %d", r.TXBatch, MaxBatch)
	case r.SndBuf < 0:
		return r, fmt.Errorf("afpacket: send buffer %d bytes: must not be negative (0 means %d)", r.SndBuf, DefaultSndBuf)
	case r.RcvBuf < MinRcvBuf:
		return r, fmt.Errorf("afpacket: receive buffer %d bytes: must be at least %d, two full-size packets (0 means %d)", r.RcvBuf, MinRcvBuf, DefaultRcvBuf)
	}
	return r, nil
}

// checkIfName rejects names the kernel would refuse, with a clearer
// message than its EINVAL or ENODEV.
func checkIfName(name string) error {
	switch {
	case name == "":
		return errors.New("afpacket: no interface name given")
	case len(name) > ifNameMax:
		return fmt.Errorf("afpacket: interface name %q: longer than %d bytes, so no interface has it", name, ifNameMax)
	}
	return nil
}
