//go:build linux

package tun

import (
	"errors"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

// errEOF is the read failure of a descriptor at end of file.
var errEOF = errors.New("read: end of file")

// landing returns the buffer a read lands in; the caller holds
// q.gate.Owner.
func (q *queue) landing() []byte {
	if q.rxCache == nil {
		if q.rxb == nil {
			q.rxb = make([]byte, q.landingSize)
		}
		return q.rxb
	}
	if q.rxIt == nil {
		q.rxIt = q.rxCache.Get()
	}
	return q.rxIt.V
}

// usoBuf returns the buffer USO datagrams are split into; the caller holds
// q.gate.Owner (or drives receive by hand, in tests).
func (q *queue) usoBuf() []byte {
	if q.rxCache == nil {
		if q.uso == nil {
			q.uso = make([]byte, maxFrameSize)
		}
		return q.uso
	}
	if q.usoIt == nil {
		q.usoIt = q.rxCache.Get()
	}
	return q.usoIt.V
}

// parkLanding gives the landing buffers back to the cache and parks it,
// before the receive goroutine parks on an empty queue; the caller holds
// q.gate.Owner.
func (q *queue) parkLanding() {
	if q.rxCache == nil {
		return
	}
	for _, it := range []**cache.Item[[]byte]{&q.rxIt, &q.usoIt} {
		if *it != nil {
			q.rxCache.Put(*it)
			*it = nil
		}
	}
	q.rxCache.Park()
}

// closeLanding releases the landing buffers and the receive ring once no
// goroutine receives: Close calls it after joining the receive goroutines,
// and takes gate.Owner so that a busy poller's round in progress ends
// first.
func (q *queue) closeLanding() {
	q.gate.Owner.Lock()
	defer q.gate.Owner.Unlock()
	q.rxRing.close()
	if q.rxCache == nil {
		return
	}
	q.rxIt, q.usoIt = nil, nil
	q.rxCache.Close()
}

// addCacheStats adds what the queue's landing cache counted to s.
func (q *queue) addCacheStats(s *cache.Stats) {
	if q.rxCache != nil {
		s.Add(q.rxCache.Stats())
	}
}

// rxLoop is a queue's receive goroutine: rounds of up to a batch of reads,
// parked in the runtime poller while the queue is empty. It ends when Close
// closes the descriptor, or when the device fails.
func (q *queue) rxLoop() {
	defer q.e.wg.Done()
	// Set by a round that ended early, at a pushed segment.
	var pushEnd bool
	read := func(fd uintptr) bool { return q.readRound(fd, &pushEnd) } // bound once: rc.Read then allocates nothing
	for {
		// While busy-polling readers drive the queue, stand aside until
		// the last one stops or the watchdog calls (linkutil.PollGate).
		if !q.gate.WaitTurn(q.e.stop) {
			return
		}
		if err := q.rc.Read(read); err != nil {
			return // closed
		}
		if pushEnd {
			// The round ended at a pushed segment: let the goroutines
			// its delivery readied (gVisor's TCP processor, the relay's
			// copier) run before the read that finds the queue empty.
			pushEnd = false
			runtime.Gosched()
		}
		if q.rxErr != nil {
			q.e.failGone(q.rxErr)
			return
		}
	}
}

// readRound runs in rc.Read with the queue's descriptor. It reads and
// delivers up to a batch of packets. It returns false, to park until the
// descriptor is readable, when the queue is empty; true after a full batch,
// so that rxLoop goes round again (where Close can stop it), after a
// failure (recorded in q.rxErr), at once when busy-polling readers have
// the queue, or after a round that ended at its first packet, a pushed TCP
// segment (setting *pushEnd).
func (q *queue) readRound(fd uintptr, pushEnd *bool) bool {
	if q.gate.Deferring() {
		return true
	}
	q.gate.Owner.Lock()
	defer q.gate.Owner.Unlock()
	q.gate.Received()
	n, again, err := q.pushRoundLocked(fd, pushEnd)
	if err != nil {
		q.rxErr = err
		return true
	}
	if n > 0 {
		q.rxRounds.Add(1)
	}
	if !again {
		q.parkLanding() // the queue is empty: the receive goroutine parks
	}
	return again
}

// roundLocked reads and delivers up to a batch of packets, holding
// q.gate.Owner: one receive round, whose TCP segments GRO coalesces and
// delivers by the round's end. again is false when the queue ran empty;
// err is a failure that ends the queue.
func (q *queue) roundLocked(fd uintptr) (n int, again bool, err error) {
	return q.pushRoundLocked(fd, nil)
}

// pushRoundLocked is roundLocked, except that with pushEnd a round whose
// first packet is a pushed TCP segment ends after it, setting *pushEnd
// (with again true).
func (q *queue) pushRoundLocked(fd uintptr, pushEnd *bool) (n int, again bool, err error) {
	q.beginRound()
	n, again, err = q.readLocked(fd, pushEnd)
	q.endRound()
	return n, again, err
}

// beginRound starts a receive round: its packets go to the dispatcher
// attached now, through GRO.
func (q *queue) beginRound() {
	q.rxd = q.e.Dispatcher()
	if q.rxd != nil {
		q.gro.Begin(q.rxd)
	}
}

// endRound ends a receive round: GRO delivers what it holds.
func (q *queue) endRound() {
	q.gro.Flush()
	q.rxd = nil
}

// readLocked is roundLocked's reading and handing to GRO. With the
// receive ring, a round reads in trips: the first asks for as many
// packets as the last round read (one: a read(2), as without the ring),
// and each trip that comes back full asks for twice as many, up to the
// ring's slots and the round's batch.
func (q *queue) readLocked(fd uintptr, pushEnd *bool) (n int, again bool, err error) {
	n, again, err = q.readTrips(fd, pushEnd, q.rxTrip)
	q.rxTrip = max(n, 1)
	return n, again, err
}

// readTrips is readLocked with the first trip's size.
func (q *queue) readTrips(fd uintptr, pushEnd *bool, trip int) (n int, again bool, err error) {
	buf := q.landing()
	for n < q.e.opts.RXBatch {
		if trip = min(trip, q.rxSlots, q.e.opts.RXBatch-n); trip > 1 {
			got, again, err, ok := q.readRing(fd, buf, trip)
			n += got
			switch {
			case !ok:
				// Read this one with read(2); from now on too if the
				// kernel refused the ring.
				if q.rxRing.off {
					q.rxSlots = 1
				}
			case err != nil || !again:
				return n, again, err
			default:
				if got == trip {
					trip *= 2
				}
				continue
			}
		}
		m, rerr := unix.Read(int(fd), buf[:rxBufSize])
		q.rxSyscalls.Add(1)
		switch {
		case rerr == nil && m == 0:
			// End of file. A TUN device never hands over an empty
			// packet; anything else that reads 0 is finished, and would
			// poll readable forever.
			return n, true, errEOF
		case rerr == nil:
			q.receive(buf[:m])
			n++
			if pushEnd != nil && n == 1 && pushed(buf[:m], q.e.offloads.VNetHeader, q.e.linkHdr) {
				// A request, most likely, alone: deliver it now rather
				// than after one more read, which would find the
				// queue empty (Linux's GRO also flushes a flow at PSH).
				*pushEnd = true
				return n, true, nil
			}
			trip *= 2
		case errors.Is(rerr, unix.EAGAIN):
			return n, false, nil
		case errors.Is(rerr, unix.EINTR):
		default:
			// EBADFD once the device is deleted (EIO and ENXIO on older
			// kernels): every further read would fail the same way, and
			// the poller would report the descriptor ready forever.
			q.rxErrors.Add(1)
			return n, true, os.NewSyscallError("read", rerr)
		}
	}
	return n, true, nil
}

// readRing is one trip of up to trip reads through the receive ring into
// the slots of buf, the landing slab; it hands what it read to GRO, in
// order. It returns how many packets it read; again is false if the
// queue ran empty (the trip's last read found nothing: a packet that
// arrives later wakes the poller), and err is a failure that ends the
// queue. ok is false if the ring cannot be used, having read nothing.
func (q *queue) readRing(fd uintptr, buf []byte, trip int) (n int, again bool, err error, ok bool) {
	slot := q.rxSlot
	results, ok := q.rxRing.read(int(fd), buf, slot, trip)
	if !ok {
		return 0, true, nil, false
	}
	q.rxSyscalls.Add(1)
	for i, res := range results {
		switch {
		case res == 0:
			return n, true, errEOF, true
		case res >= int32(slot):
			// Larger than the slot: the device's MTU was raised behind
			// our back. The packet is lost (cut); make room for the
			// next ones.
			q.rxErrors.Add(1)
			q.growRXSlot(int(res))
		case res > 0:
			q.receive(buf[i*slot : i*slot+int(res)])
			n++
		case res == -int32(unix.EAGAIN), res == -int32(unix.EINTR):
		default:
			q.rxErrors.Add(1)
			return n, true, os.NewSyscallError("read", unix.Errno(-res)), true
		}
	}
	return n, results[len(results)-1] != -int32(unix.EAGAIN), nil, true
}

// setupRXRing gives the queue a receive ring, where the kernel has one,
// with slots for packets of the MTU mtu: as many as rxRingEntries in at
// most rxSlabMax bytes, or in rxBufSize, the landing buffer without the
// ring, if that holds more.
func (q *queue) setupRXRing(mtu uint32) {
	q.rxRing = newRXRing() // nil where the kernel has none: read(2)
	if q.rxRing == nil {
		return
	}
	q.rxSlot = rxSlotFor(int(mtu))
	q.rxSlots = min(rxRingEntries, max(rxSlabMax, rxBufSize)/q.rxSlot)
	q.landingSize = max(rxBufSize, q.rxSlots*q.rxSlot)
}

// growRXSlot makes the receive ring's slots hold a packet of size bytes
// (or, where the read did not say how large the packet was, twice as
// much as they held), in the landing slab as it is: fewer of them.
func (q *queue) growRXSlot(size int) {
	q.rxSlot = max(rxSlotFor(size), 2*q.rxSlot)
	q.rxSlots = q.landingSize / q.rxSlot
	if q.rxSlots < 2 {
		q.rxSlots = 1 // read(2) into the whole buffer from now on
	}
}

// rxSlotFor is the receive ring's slot for packets of up to size bytes:
// one byte more, so that a packet that fills its slot is recognisably cut
// (a TUN read returns the packet's whole length, a socket's what it
// copied), rounded up to a cache line.
func rxSlotFor(size int) int { return (size + 1 + 63) &^ 63 }

// pushed reports whether frame, as read from the device (after a
// virtio-net header with vnetHdr, and an Ethernet header of linkHdr bytes
// on a TAP device), is a TCP segment with PSH set: the end of what its
// sender had to send for now.
func pushed(frame []byte, vnetHdr bool, linkHdr int) bool {
	ip := frame
	if vnetHdr {
		if len(frame) < vnet.HeaderSize {
			return false
		}
		ip = frame[vnet.HeaderSize:]
	}
	if linkHdr > 0 {
		if len(ip) < linkHdr {
			return false
		}
		switch header.Ethernet(ip).Type() {
		case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber:
		default:
			return false
		}
		ip = ip[linkHdr:]
	}
	var l4 []byte
	switch header.IPVersion(ip) {
	case header.IPv4Version:
		if len(ip) < header.IPv4MinimumSize {
			return false
		}
		h := header.IPv4(ip)
		hl := int(h.HeaderLength())
		if h.Protocol() != uint8(header.TCPProtocolNumber) || hl < header.IPv4MinimumSize || len(ip) < hl {
			return false
		}
		l4 = ip[hl:]
	case header.IPv6Version:
		if len(ip) < header.IPv6MinimumSize || header.IPv6(ip).NextHeader() != uint8(header.TCPProtocolNumber) {
			return false
		}
		l4 = ip[header.IPv6MinimumSize:]
	default:
		return false
	}
	return len(l4) >= header.TCPMinimumSize && header.TCP(l4).Flags()&header.TCPFlagPsh != 0
}

// busyPoll runs one non-blocking receive round for a busy-polling reader,
// unless another goroutine is receiving, and returns the packets read. A
// failure is left to the receive goroutine, which it wakes.
func (q *queue) busyPoll() int {
	if !q.gate.Owner.TryLock() {
		return 0
	}
	defer q.gate.Owner.Unlock()
	if q.pollRound == nil {
		q.pollRound = func(fd uintptr) { q.pollN, _, q.pollErr = q.roundLocked(fd) }
	}
	if q.rc.Control(q.pollRound) != nil {
		return 0 // closed
	}
	n, err := q.pollN, q.pollErr
	if n > 0 {
		q.rxRounds.Add(1)
		q.gate.CountPolled()
	}
	if err != nil {
		q.gate.Force()
	}
	return n
}

// receive handles one frame read from the queue: the virtio-net header (if
// on), then the IP packet, or on a TAP device the Ethernet frame, in the
// queue's landing buffer b, which is reused as soon as receive returns. It
// checks the header and the checksums, splits a UDP super-packet, and
// delivers.
func (q *queue) receive(b []byte) {
	if len(b) >= rxBufSize {
		// The packet filled the buffer: it was larger and got cut.
		q.rxErrors.Add(1)
		return
	}
	e := q.e
	frame := b
	var h vnet.Header
	if e.offloads.VNetHeader {
		var err error
		if h, err = vnet.Decode(b); err != nil {
			q.rxErrors.Add(1)
			return
		}
		frame = b[vnet.HeaderSize:]
		if h.Check(len(frame)) != nil {
			q.rxErrors.Add(1)
			return
		}
	}
	ip := frame
	if e.tap {
		var ok bool
		if frame, ok = q.parseFrame(frame); !ok {
			return
		}
		if q.rxProto == header.ARPProtocolNumber {
			q.deliver(frame) // no checksum, no offload
			return
		}
		ip = frame[header.EthernetMinimumSize:]
	}
	if !e.offloads.VNetHeader {
		if e.verifyRX() {
			// The endpoint claims RX checksum offload for GRO's sake:
			// check here what gVisor then will not.
			switch vnet.CheckIP(ip) {
			case vnet.Bad:
				q.rxBadChecksum.Add(1)
				return
			case vnet.Malformed:
				q.rxMalformed.Add(1)
				return
			}
		}
		q.deliver(frame)
		return
	}
	switch vnet.Inspect(h, ip) {
	case vnet.Bad:
		q.rxBadChecksum.Add(1)
		return
	case vnet.Malformed:
		q.rxMalformed.Add(1)
		return
	}
	switch h.GSOType &^ vnet.GSOECN {
	case vnet.GSOUDPL4:
		if _, err := splitUSO(h, frame, e.linkHdr, q.usoBuf(), q.countUSO, q.deliver); err != nil {
			q.rxErrors.Add(1)
		}
		return
	case vnet.GSOTCPv4, vnet.GSOTCPv6:
		// gVisor takes a TCP segment of any size: deliver it whole, as
		// Linux's own stack takes a GRO packet.
		q.e.rxSuper.Add(1)
	}
	q.deliver(frame)
}

// parseFrame reads the Ethernet header of frame, a TAP device's, into
// q.rxProto and q.rxType for deliver, and returns the frame cut to its IP
// packet's own length (linkutil.TrimPadding). It drops and counts, and
// reports false for, a frame shorter than its header (RXErrors), one of
// an EtherType other than IPv4, IPv6 and ARP, and one addressed to
// another host (RXMalformed: Linux drops those too, and a forwarding
// stack must not route them).
func (q *queue) parseFrame(frame []byte) ([]byte, bool) {
	if len(frame) < header.EthernetMinimumSize {
		q.rxErrors.Add(1)
		return nil, false
	}
	eth := header.Ethernet(frame)
	q.rxProto = eth.Type()
	switch q.rxProto {
	case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber, header.ARPProtocolNumber:
	default:
		q.rxMalformed.Add(1)
		return nil, false
	}
	if q.rxType = q.e.packetType(frame[:header.EthernetAddressSize]); q.rxType == tcpip.PacketOtherHost {
		q.rxMalformed.Add(1)
		return nil, false
	}
	return linkutil.TrimPadding(frame, header.EthernetMinimumSize, q.rxProto), true
}

// packetType classifies a received frame by its destination address dst,
// as gVisor's Ethernet endpoint does, for the stack (ARP takes a reply
// sent to this host, PacketHost, as solicited).
func (e *Endpoint) packetType(dst []byte) tcpip.PacketType {
	switch {
	case string(dst) == string(header.EthernetBroadcastAddress):
		return tcpip.PacketBroadcast
	case dst[0]&0x01 != 0: // the group bit
		return tcpip.PacketMulticast
	case string(dst) == string(e.LinkAddress()):
		return tcpip.PacketHost
	}
	return tcpip.PacketOtherHost
}

// countUSO counts a UDP super-packet about to be split into n datagrams.
func (q *queue) countUSO(n int) {
	q.e.rxUSO.Add(1)
	q.e.rxUSODatagrams.Add(uint64(n))
}

// deliver copies the IP packet ip (on a TAP device, the Ethernet frame
// that parseFrame read) once into a right-sized pooled view and hands it
// to the round's GRO, for the round's dispatcher: on a TAP device with
// its Ethernet header consumed, so that GRO sees the IP packet. ip is the
// caller's and may be reused as soon as deliver returns.
func (q *queue) deliver(ip []byte) {
	proto := q.rxProto
	if !q.e.tap {
		var ok bool
		if proto, ok = link.NetworkProtocol(ip); !ok {
			q.rxMalformed.Add(1)
			return
		}
	}
	if q.rxd == nil {
		q.rxDetached.Add(1)
		return
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		Payload: buffer.MakeWithView(buffer.NewViewWithData(ip)),
	})
	if q.e.tap {
		// Cannot fail: parseFrame checked the length, and a USO datagram
		// carries the super-packet's header.
		pkt.LinkHeader().Consume(header.EthernetMinimumSize)
		pkt.PktType = q.rxType
	}
	pkt.NetworkProtocolNumber = proto
	pkt.RXChecksumValidated = q.e.Capabilities()&stack.CapabilityRXChecksumOffload != 0
	q.rxPackets.Add(1)
	q.rxBytes.Add(uint64(len(ip)))
	q.gro.Enqueue(pkt)
	pkt.DecRef()
}
