//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
)

const (
	// downCheckInterval is how often a receive goroutine whose interface
	// went down checks whether it was deleted. The kernel reports a device
	// going down or away once (ENETDOWN), before it is unlisted, so the
	// first check may still find it; after that nothing wakes a reader of
	// an unbound socket. Four checks a second find a deleted device within
	// a quarter second and cost nothing measurable.
	downCheckInterval = 250 * time.Millisecond
	// rxErrorBackoff is how long a receive goroutine waits after a read
	// error it does not expect (ENOMEM, say) before reading again, so that
	// a persistent error cannot make it spin.
	rxErrorBackoff = 10 * time.Millisecond
)

// rxBatch is one queue's landing area for one recvmmsg: RXBatch buffers of
// rxBufSize bytes in one slab, with a message header, an iovec, a
// link-layer address (for the packet type) and, without the virtio-net
// header, a control buffer (for PACKET_AUXDATA) each. The kernel copies
// frames into it (it is not a PACKET_MMAP ring shared with the kernel). It
// belongs to whoever holds the queue's gate.Owner and is reused for every
// round.
type rxBatch struct {
	slab  []byte
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrLinklayer
	ctrl  []byte // nil unless aux
	used  int    // messages the last recvmmsg filled in
}

// size returns the bytes the batch holds.
func (r *rxBatch) size() int { return rxBatchSize(len(r.msgs), r.ctrl != nil) }

// reset readies the batch for its next owner: every message header is
// restored before the next read. The landing buffers need no clearing:
// a round reads only what the kernel wrote into them in that round.
func (r *rxBatch) reset() { r.used = len(r.msgs) }

// recv reads a round from fd, first restoring the header fields that the
// previous round's messages had overwritten.
func (r *rxBatch) recv(fd int) (int, unix.Errno) { return r.recvN(fd, len(r.msgs)) }

// recvN is recv of at most k messages, 1 <= k <= len(r.msgs).
func (r *rxBatch) recvN(fd, k int) (int, unix.Errno) {
	for i := range r.used {
		m := &r.msgs[i]
		m.Len = 0
		m.Hdr.Namelen = unix.SizeofSockaddrLinklayer
		m.Hdr.Flags = 0
		if r.ctrl != nil {
			m.Hdr.SetControllen(auxSpace)
		}
	}
	n, errno := recvmmsg(fd, r.msgs[:k])
	switch errno {
	case 0:
		r.used = n
	case unix.EAGAIN:
		r.used = 0 // the kernel wrote nothing
	default:
		r.used = k // it may have written anything: restore all
	}
	return n, errno
}

// buf returns the bytes message i received.
func (r *rxBatch) buf(i int) []byte {
	off := i * rxBufSize
	return r.slab[off : off+min(int(r.msgs[i].Len), rxBufSize)]
}

// truncated reports whether message i did not fit its buffer.
func (r *rxBatch) truncated(i int) bool { return r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// pktType returns message i's sll_pkttype; a socket that reports no
// link-layer address (a test's socketpair) gets PACKET_HOST.
func (r *rxBatch) pktType(i int) uint8 {
	if r.msgs[i].Hdr.Namelen < unix.SizeofSockaddrLinklayer || r.names[i].Family != unix.AF_PACKET {
		return unix.PACKET_HOST
	}
	return r.names[i].Pkttype
}

// partial reports whether PACKET_AUXDATA says message i's checksum is
// partial (TP_STATUS_CSUMNOTREADY).
func (r *rxBatch) partial(i int) bool {
	if r.ctrl == nil {
		return false
	}
	n := min(int(r.msgs[i].Hdr.Controllen), auxSpace)
	st, ok := auxStatus(r.ctrl[i*auxSpace : i*auxSpace+n])
	return ok && st&unix.TP_STATUS_CSUMNOTREADY != 0
}

// landing returns the landing batch for a receive round; the caller holds
// q.gate.Owner.
func (q *queue) landing() *rxBatch {
	if q.rxCache == nil {
		return q.rxb
	}
	if q.rxIt == nil {
		q.rxIt = q.rxCache.Get()
	}
	return q.rxIt.V
}

// parkLanding gives the landing batch back to the cache and parks it,
// before the receive goroutine parks on an empty socket; the caller holds
// q.gate.Owner.
func (q *queue) parkLanding() {
	if q.rxCache == nil {
		return
	}
	if q.rxIt != nil {
		q.rxCache.Put(q.rxIt)
		q.rxIt = nil
	}
	q.rxCache.Park()
}

// closeLanding unmaps the ring and releases the landing batch, once no
// goroutine receives: Close calls it after joining the receive goroutine,
// and takes gate.Owner so that a busy poller's round in progress ends
// first (a later one finds the ring unmapped).
func (q *queue) closeLanding() {
	q.gate.Owner.Lock()
	defer q.gate.Owner.Unlock()
	rxRing{q.ring, q.slots}.unmap()
	if q.rxCache != nil {
		q.rxIt = nil
		q.rxCache.Close()
	}
}

// addCacheStats adds what the queue's landing cache counted to s.
func (q *queue) addCacheStats(s *cache.Stats) {
	if q.rxCache != nil {
		s.Add(q.rxCache.Stats())
	}
}

// rxLoop is a queue's receive goroutine: it reads up to a batch with one
// recvmmsg, delivers it (one RX round, like a NAPI poll), and parks in the
// netpoller when the socket is empty. While busy-polling readers drive the
// queue it stands aside (linkutil.PollGate). It returns when the socket is
// closed or the device is gone.
func (q *queue) rxLoop() {
	defer q.e.wg.Done()
	var (
		r        *rxBatch
		n        int
		errno    unix.Errno
		deferred bool
		down     bool // the interface went down: reads have a deadline
		// errCheck: the slot ring parked after frames without asking
		// the socket for an error, and reads have a deadline for that.
		errCheck bool
	)
	// read returns true holding q.gate.Owner, unless it found the queue
	// deferred to busy pollers. A recvmmsg round that came back short
	// drained the socket: read delivers it itself and waits for the next
	// frame in the same poller wait (false), without the recvmmsg that
	// would only have said EAGAIN. No frame is missed: the poller's
	// readiness was reset when this wait began, before that recvmmsg, and
	// every frame queued after it signals readiness again (Go's poller is
	// edge-triggered per frame on a packet socket).
	//
	// The slot ring parks the same way after taking frames, with no
	// system call at all. An error the kernel left on the socket (the
	// interface going down) wakes the queue too, but a wake that arrives
	// while an earlier one is still pending merges into it, so the frames
	// may hide it; a slot ring that parked unchecked therefore has a read
	// deadline of downCheckInterval, armed once, and asks when it fires.
	read := func(fd uintptr) bool {
		if q.gate.Deferring() {
			deferred = true
			return true
		}
		q.gate.Owner.Lock()
		more := false
		switch {
		case q.slots != nil:
			// The slot round delivers as it reads: r stays nil. Only a
			// wake that found no frame asks the socket for an error.
			n, more, errno = q.slotRound(int(fd))
			if errno == 0 && q.slotErrno != 0 {
				errno, q.slotErrno = q.slotErrno, 0
			}
			if n == 0 && errno == 0 {
				errno = q.pendingError(int(fd))
			}
		case q.ring != nil:
			// The ring round delivers as it reads: r stays nil.
			n, errno = q.ringRound(int(fd))
		default:
			r = q.landing()
			n, errno = r.recv(int(fd))
			q.rxSyscalls.Add(1)
		}
		if errno == unix.EAGAIN {
			q.parkLanding()
			q.gate.Owner.Unlock()
			return false
		}
		q.gate.Received()
		if errno == 0 && r != nil && n < len(r.msgs) && !down {
			q.deliver(r, n)
			q.parkLanding()
			q.gate.Owner.Unlock()
			return false
		}
		if errno == 0 && q.slots != nil && !more && !down {
			q.parkLanding() // delivered, and the ring is empty
			q.gate.Owner.Unlock()
			if !errCheck {
				errCheck = true
				q.file.SetReadDeadline(time.Now().Add(downCheckInterval))
			}
			return false
		}
		return true
	}
	for {
		if !q.gate.WaitTurn(q.e.stop) {
			return
		}
		deferred = false
		err := q.rc.Read(read)
		if err == nil && deferred {
			continue
		}
		if err == nil {
			// The round is delivered before it is released: a busy
			// poller meanwhile finds the queue taken.
			if errno == 0 && r != nil {
				q.deliver(r, n)
			}
			q.gate.Owner.Unlock()
		}
		if err != nil && errCheck && !down && errors.Is(err, os.ErrDeadlineExceeded) {
			errCheck = false
			q.file.SetReadDeadline(time.Time{})
			err = q.rc.Control(func(fd uintptr) { errno = q.pendingError(int(fd)) })
			if err == nil && errno == unix.EAGAIN {
				continue
			}
		}
		if err != nil {
			if down && errors.Is(err, os.ErrDeadlineExceeded) {
				if q.checkGone(q.rxCall(), unix.ENETDOWN) {
					return
				}
				q.file.SetReadDeadline(time.Now().Add(downCheckInterval))
				continue
			}
			if !q.e.closing.Load() {
				q.e.fail(fmt.Errorf("afpacket: receive on %q, queue %d: %w", q.e.ifname, q.idx, err))
			}
			return
		}
		if down {
			down = false
			q.file.SetReadDeadline(time.Time{})
		}
		switch errno {
		case 0, unix.EINTR:
		case unix.ENETDOWN, unix.ENXIO, unix.ENODEV:
			// Down or gone; the kernel says so once, then the socket is
			// silent. Gone is final; down waits for the interface to come
			// back up, checking now and then whether it was deleted.
			if q.checkGone(q.rxCall(), errno) {
				return
			}
			down, errCheck = true, false
			q.file.SetReadDeadline(time.Now().Add(downCheckInterval))
		default:
			q.rxErrors.Add(1)
			if !q.e.pause(rxErrorBackoff) {
				return
			}
		}
	}
}

// busyPoll runs one non-blocking receive round for a busy-polling reader,
// unless another goroutine is receiving, and returns the frames delivered.
func (q *queue) busyPoll() int {
	if !q.gate.Owner.TryLock() {
		return 0
	}
	defer q.gate.Owner.Unlock()
	if q.ring != nil {
		return q.busyPollRing()
	}
	if q.slots != nil {
		return q.busyPollSlots()
	}
	if q.pollRecv == nil {
		q.pollRecv = func(fd uintptr) { q.pollN, q.pollErrno = q.landing().recv(int(fd)) }
	}
	if q.rc.Control(q.pollRecv) != nil {
		return 0 // closed
	}
	n, errno := q.pollN, q.pollErrno
	q.rxSyscalls.Add(1)
	switch errno {
	case 0:
		q.deliver(q.landing(), n)
		q.gate.CountPolled()
		return n
	case unix.EAGAIN, unix.EINTR:
	default:
		// Down, gone or failing: the receive goroutine knows what to do.
		q.gate.Force()
	}
	return 0
}

// rxCall names the system call that reports a receive failure: recvmmsg,
// or with the ring the read of the socket's pending error.
func (q *queue) rxCall() string {
	if q.ring != nil || q.slots != nil {
		return "getsockopt SO_ERROR"
	}
	return "recvmmsg"
}

// checkGone reports whether the interface no longer exists, recording the
// failure (with the errno that led here) if so.
func (q *queue) checkGone(call string, errno unix.Errno) bool {
	gone := false
	err := q.rc.Control(func(fd uintptr) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return
		}
		ifr.SetUint32(uint32(q.e.ifindex))
		gone = errors.Is(unix.IoctlIfreq(int(fd), unix.SIOCGIFNAME, ifr), unix.ENODEV)
	})
	if err != nil {
		return true // closed
	}
	if gone {
		q.e.failGone(os.NewSyscallError(call, errno))
	}
	return gone
}

// pause waits d, or until Close; it reports false if Close came first.
func (e *Endpoint) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.stop:
		return false
	}
}

// deliver hands the n frames of one RX round to the stack (beginRound,
// receive, endRound).
func (q *queue) deliver(r *rxBatch, n int) {
	q.beginRound()
	for i := range n {
		q.receive(r.buf(i), r.pktType(i), r.truncated(i), r.partial(i))
	}
	q.endRound()
}

// beginRound starts a receive round: its frames go to the dispatcher
// attached now, through GRO. The caller holds q.gate.Owner.
func (q *queue) beginRound() {
	q.rxd = q.e.Dispatcher()
	if q.rxd != nil {
		q.gro.Begin(q.rxd)
	}
}

// endRound ends a receive round: GRO delivers what it holds, and the
// round's counts are published.
func (q *queue) endRound() {
	q.gro.Flush()
	q.rxd = nil
	q.rxPackets.Add(q.roundPkts)
	q.rxBytes.Add(q.roundBytes)
	q.rxRounds.Add(1)
	q.roundPkts, q.roundBytes = 0, 0
}

// receive handles one frame of a round: b as the socket handed it over
// (behind a virtio-net header if on), with its sll_pkttype, whether it was
// cut short and whether PACKET_AUXDATA called its checksum partial. The
// frame is copied once, into a pooled view of its own size, so b can take
// the next frame at once.
func (q *queue) receive(b []byte, pt uint8, truncated, partial bool) {
	switch {
	case pt == unix.PACKET_OUTGOING:
		return // our own, should PACKET_IGNORE_OUTGOING be missing
	case q.rxd == nil:
		q.rxDetached.Add(1)
		return
	case truncated:
		q.rxErrors.Add(1)
		return
	case pt == unix.PACKET_OTHERHOST:
		q.rxMalformed.Add(1)
		return
	}
	frame, proto, v := parseRX(b, q.e.rxCheck, partial)
	switch v {
	case rxError:
		q.rxErrors.Add(1)
		return
	case rxMalformed:
		q.rxMalformed.Add(1)
		return
	case rxBadChecksum:
		q.rxBadChecksum.Add(1)
		return
	}
	frame = trimPadding(frame, proto)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		Payload: buffer.MakeWithView(buffer.NewViewWithData(frame)),
	})
	pkt.PktType = packetType(pt)
	q.e.ParseHeader(pkt) // cannot fail: parseRX checked the length
	pkt.NetworkProtocolNumber = proto
	pkt.RXChecksumValidated = q.e.rxCheck != checkStack
	q.gro.Enqueue(pkt)
	pkt.DecRef()
	q.roundPkts++
	q.roundBytes += uint64(len(frame))
}

// packetType translates sll_pkttype into gVisor's numbering.
func packetType(pt uint8) tcpip.PacketType {
	switch pt {
	case unix.PACKET_BROADCAST:
		return tcpip.PacketBroadcast
	case unix.PACKET_MULTICAST:
		return tcpip.PacketMulticast
	default:
		return tcpip.PacketHost
	}
}
