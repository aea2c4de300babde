package link

// Stats is a snapshot of one link endpoint's counters. Every packet handed
// to or taken from the endpoint is in exactly one of them: transmitted,
// refused back to the writer (with its reason), delivered, or dropped (with
// its reason). Impairment counters say what fault injection did on top.
type Stats struct {
	// TXPackets and TXBytes count what the endpoint sent of the packets
	// WritePackets returned as written, as the interface would count it:
	// a TCP super-segment handed to the kernel whole (virtio-net header)
	// is one packet, one the endpoint cuts into MTU frames itself is as
	// many packets as frames.
	TXPackets, TXBytes uint64
	// TXCalls counts WritePackets calls: TXPackets/TXCalls is the mean
	// batch the writer achieved.
	TXCalls uint64
	// TXFull counts packets refused because the device queue was full. They
	// were returned to the writer (the qdisc requeues them, or the caller
	// sees ErrNoBufferSpace); they were never accepted, so never lost.
	TXFull uint64
	// TXClosed counts packets refused because the endpoint or its peer was
	// closed.
	TXClosed uint64
	// TXErrors counts packets a device failed with a hard error (the
	// device went away, say); they are dropped.
	TXErrors uint64
	// TXSyscalls counts write system calls (sendmmsg, write, ring kicks):
	// TXPackets/TXSyscalls is what bulk transmit achieved.
	TXSyscalls uint64

	// RXPackets and RXBytes count packets delivered to the attached stack.
	RXPackets, RXBytes uint64
	// RXThinnedACKs counts the pure ACKs among RXPackets that receive
	// offload (GRO) folded into a later ACK of the same TCP flow in the
	// same receive round, instead of handing each to TCP. ACKs are
	// cumulative: the later one says all they did, so no news was lost.
	RXThinnedACKs uint64
	// RXRounds counts receive rounds (one per batch delivered, like a NAPI
	// poll): RXPackets/RXRounds is the mean receive batch.
	RXRounds uint64
	// RXBusyPolled counts the receive rounds among RXRounds that a
	// busy-polling reader ran from its own goroutine (package poll).
	RXBusyPolled uint64
	// RXDetached counts accepted packets dropped because no stack was
	// attached when they arrived.
	RXDetached uint64
	// RXMalformed counts accepted packets dropped because they were not
	// IPv4 or IPv6, or, where the endpoint checks checksums itself, were
	// too malformed to check (cut short, lengths that disagree).
	RXMalformed uint64
	// RXClosed counts accepted packets still queued when the endpoint was
	// closed, and released without delivery.
	RXClosed uint64
	// RXBadChecksum counts packets dropped because a checksum the kernel
	// had not vouched for was wrong.
	RXBadChecksum uint64
	// RXErrors counts failed reads and packets a device handed over that
	// could not be parsed (a bad virtio-net header, a truncated frame).
	RXErrors uint64
	// RXSyscalls counts read system calls (recvmmsg, read, ring polls).
	RXSyscalls uint64

	// ImpairLost, ImpairDuplicated, ImpairReordered, ImpairCorrupted and
	// ImpairDelayed count what fault injection did to accepted packets.
	// Lost packets are dropped on purpose; the others are still delivered.
	ImpairLost, ImpairDuplicated, ImpairReordered, ImpairCorrupted, ImpairDelayed uint64
}

// Reporter is implemented by link endpoints that keep Stats. Package stack
// finds it by type assertion on each NIC's endpoint.
type Reporter interface {
	// LinkStats returns a snapshot of the endpoint's counters. It is safe to
	// call from any goroutine at any time, including after Close.
	LinkStats() Stats
}

// Coalescer is implemented by link endpoints whose receive path merges
// packets for the host's own TCP (afpacket, tun and pktio: GRO and the
// thinning of pure ACKs). A merged segment is larger than the MTU and a
// thinned ACK stream is not the one the peer sent: fit for a stack that
// ends the flow, not for one that routes it. Package stack calls
// SetCoalescing(false) on every NIC of a stack that forwards
// (stack.Options.Routing), before it attaches the endpoint.
type Coalescer interface {
	// SetCoalescing turns the merging off (on false), so that every
	// packet climbs the stack as it came, or back to the endpoint's
	// configured behaviour. Safe from any goroutine; it takes effect
	// from the next receive round.
	SetCoalescing(on bool)
}

// Add adds every counter of o to s: what an endpoint with several queues
// reports as its total, or what a caller sums over several endpoints.
func (s *Stats) Add(o Stats) {
	s.TXPackets += o.TXPackets
	s.TXBytes += o.TXBytes
	s.TXCalls += o.TXCalls
	s.TXFull += o.TXFull
	s.TXClosed += o.TXClosed
	s.TXErrors += o.TXErrors
	s.TXSyscalls += o.TXSyscalls
	s.RXPackets += o.RXPackets
	s.RXBytes += o.RXBytes
	s.RXThinnedACKs += o.RXThinnedACKs
	s.RXRounds += o.RXRounds
	s.RXBusyPolled += o.RXBusyPolled
	s.RXDetached += o.RXDetached
	s.RXMalformed += o.RXMalformed
	s.RXClosed += o.RXClosed
	s.RXBadChecksum += o.RXBadChecksum
	s.RXErrors += o.RXErrors
	s.RXSyscalls += o.RXSyscalls
	s.ImpairLost += o.ImpairLost
	s.ImpairDuplicated += o.ImpairDuplicated
	s.ImpairReordered += o.ImpairReordered
	s.ImpairCorrupted += o.ImpairCorrupted
	s.ImpairDelayed += o.ImpairDelayed
}
