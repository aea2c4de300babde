//go:build linux

package afpacket

import (
	"os"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/vnet"
)

// WritePackets implements stack.LinkWriter. It sends the packets in order,
// as few sendmmsg calls as the batch size and the queues allow (one, with
// one queue and a batch no larger than TXBatch), each packet's views as
// iovecs behind a virtio-net header. It borrows the packets for the call
// only: the caller keeps its references and the list.
//
// It returns how many packets, from the front of the list, were sent, and
// why it stopped short:
//   - ErrNoBufferSpace: a socket was full. The rest was not sent and is the
//     caller's to retry (counted in TXFull); the endpoint calls the
//     NotifyWritable callback when the socket has room.
//   - ErrClosedForSend: the endpoint is closed (TXClosed) or the interface
//     is gone (TXErrors, and Err says so); nothing more will be sent.
//   - another error: the kernel refused the packet after the ones sent
//     (too big, the interface down): that packet is dropped and counted in
//     TXErrors; the rest was not tried.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	list := pkts.AsSlice()
	e.txCalls.Add(1)
	if len(list) == 0 {
		return 0, nil
	}
	if e.closing.Load() {
		e.txClosed.Add(uint64(len(list)))
		return 0, &tcpip.ErrClosedForSend{}
	}
	if e.err.Load() != nil {
		e.queues[0].txErrors.Add(uint64(len(list)))
		return 0, &tcpip.ErrClosedForSend{}
	}
	if e.txCache != nil && e.txMu.TryLock() {
		// The owner's scratch: taken, used, put back and parked (so an
		// idle endpoint's is released), with no atomic operation on the
		// way but the lock's and the park's.
		it := e.txCache.Get()
		n, err := e.writePackets(it.V, list)
		e.txCache.Put(it)
		e.txCache.Park()
		e.txMu.Unlock()
		return n, err
	}
	// Without the cache, or for a writer that finds the owner busy (with
	// gVisor's none qdisc every sender writes at once): a per-P pool
	// serves concurrent writers better than one owner's cache, whose
	// misses allocated a scratch per call (measured: 20x the bytes per
	// transaction at 64 tcp_rr sessions on veth).
	s := e.txPool.Get().(*txScratch)
	defer e.txPool.Put(s)
	return e.writePackets(s, list)
}

// txQueue picks the queue that sends pkt: always the first with one queue,
// otherwise by its flow hash, so every flow leaves through one socket and
// keeps its order.
func (e *Endpoint) txQueue(pkt *stack.PacketBuffer) int {
	if len(e.queues) == 1 {
		return 0
	}
	return link.QueueIndex(link.PacketFlowHash(pkt), len(e.queues))
}

// writePackets is WritePackets with a scratch to build the messages in.
func (e *Endpoint) writePackets(s *txScratch, list []*stack.PacketBuffer) (int, tcpip.Error) {
	sent := 0
	for sent < len(list) {
		qi, end := 0, len(list)
		if len(e.queues) > 1 {
			qi, end = e.txQueue(list[sent]), sent+1
			for end < len(list) && e.txQueue(list[end]) == qi {
				end++
			}
		}
		q := e.queues[qi]
		n, errno := q.send(s, list[sent:end])
		sent += n
		if errno != 0 {
			return sent, q.refused(len(list)-sent, errno)
		}
	}
	return sent, nil
}

// send sends pkts on the queue's socket in sendmmsg calls of up to TXBatch
// frames, looping over partial sends. A TCP super-segment that the
// endpoint cuts itself (no virtio-net header) is all its frames, which
// leave in one call where TXBatch allows, and counts as sent once its
// last frame is; one whose frames the kernel took only in part counts as
// not sent, and is the caller's to retry whole (the receiver discards the
// frames it then gets twice). TXPackets and TXBytes count the frames that
// left, as the interface counts them. It returns how many packets were sent and,
// if it stopped short, the errno that stopped it (EBADF once closed).
func (q *queue) send(s *txScratch, pkts []*stack.PacketBuffer) (int, unix.Errno) {
	defer s.clear()
	sent := 0
	for sent < len(pkts) {
		msgs := s.build(pkts[sent:], q.e.vnetHdr)
		done := 0 // messages of msgs sent
		for done < len(msgs) {
			s.pending = msgs[done:]
			if err := q.rc.Control(s.sendFn); err != nil {
				return sent, unix.EBADF
			}
			q.txSyscalls.Add(1)
			switch {
			case s.errno == unix.EINTR:
				continue
			case s.errno != 0:
				return sent, s.errno
			case s.n <= 0:
				return sent, unix.EAGAIN
			}
			complete, bytes := 0, 0
			for i := done; i < done+s.n; i++ {
				if s.lasts[i] {
					complete++
				}
				bytes += s.sizes[i]
			}
			q.txPackets.Add(uint64(s.n))
			q.txBytes.Add(uint64(bytes))
			sent += complete
			done += s.n
		}
	}
	return sent, 0
}

// refused accounts for the rest packets that a send on q stopped short of
// because of errno, and translates errno for the writer.
func (q *queue) refused(rest int, errno unix.Errno) tcpip.Error {
	e := q.e
	switch errno {
	case unix.EAGAIN, unix.ENOBUFS:
		// Full: the socket's send buffer (EAGAIN), or a kernel qdisc in
		// front of the device (ENOBUFS). Either way the writer keeps the
		// rest and hears from the watcher.
		q.txFull.Add(uint64(rest))
		q.watch.Refused(&e.Lifecycle, q.startWatch)
		return &tcpip.ErrNoBufferSpace{}
	case unix.EBADF:
		e.txClosed.Add(uint64(rest))
		return &tcpip.ErrClosedForSend{}
	case unix.ENXIO, unix.ENODEV:
		e.failGone(os.NewSyscallError("sendmmsg", errno))
		q.txErrors.Add(uint64(rest))
		return &tcpip.ErrClosedForSend{}
	case unix.ENETDOWN:
		q.txErrors.Add(1)
		return &tcpip.ErrNetworkUnreachable{}
	default:
		q.txErrors.Add(1)
		return tcpip.TranslateErrno(errno)
	}
}

// maxIovPerMsg is the most iovecs one message may have: UIO_MAXIOV.
const maxIovPerMsg = 1024

// txScratch is what one WritePackets call needs for its sendmmsg calls:
// message headers, iovecs, virtio-net headers and the headers of the
// frames cut from super-segments, for up to TXBatch frames (more for a
// lone super-segment with more frames). A call takes the endpoint's
// cached one if it gets txMu, and one from txPool if not (or with
// NoCache), so it allocates nothing once they are warm, and concurrent
// calls use different ones.
type txScratch struct {
	msgs    []unix.Mmsghdr
	iovs    []unix.Iovec
	vhdrs   []byte
	starts  []int            // the first iovec of each message
	lasts   []bool           // each message is its packet's last frame
	sizes   []int            // each message's frame length, for TXBytes
	hdrs    []byte           // the headers of cut frames, one after another
	flat    []*buffer.View   // copies of packets with too many views
	pending []unix.Mmsghdr   // what the current sendmmsg is to send
	n       int              // sendFn's result
	errno   unix.Errno       // sendFn's error
	sendFn  func(fd uintptr) // sends pending; allocated once
}

func newTXScratch(batch int) *txScratch {
	s := &txScratch{
		msgs:   make([]unix.Mmsghdr, batch),
		iovs:   make([]unix.Iovec, 0, 4*batch),
		vhdrs:  make([]byte, batch*vnet.HeaderSize),
		starts: make([]int, batch),
		lasts:  make([]bool, batch),
		sizes:  make([]int, batch),
	}
	s.sendFn = func(fd uintptr) { s.n, s.errno = sendmmsg(int(fd), s.pending) }
	return s
}

// frames returns how many frames pkt leaves as, and whether the endpoint
// cuts it: without the virtio-net header a TCP super-segment (host GSO,
// which the endpoint offers in place of gVisor's software GSO) becomes
// frames of at most its MSS of payload, each with complete checksums.
func frames(pkt *stack.PacketBuffer, vnetHdr bool) (int, bool) {
	if vnetHdr {
		return 1, false
	}
	switch pkt.GSOOptions.Type {
	case stack.GSOTCPv4, stack.GSOTCPv6:
	default:
		return 1, false
	}
	mss := int(pkt.GSOOptions.MSS)
	size := pkt.Data().Size()
	if mss <= 0 || size <= mss {
		return 1, true
	}
	return (size + mss - 1) / mss, true
}

// build fills the message headers for the first of pkts, and as many more
// as fit in len(s.msgs) frames, and returns them: per packet, a
// virtio-net header if vnetHdr, then the packet's views from its link
// header on, no payload copied; or, for a packet the endpoint cuts, per
// frame a copy of its headers fixed up for the frame and the views of the
// frame's payload. s.lasts marks each packet's last message.
func (s *txScratch) build(pkts []*stack.PacketBuffer, vnetHdr bool) []unix.Mmsghdr {
	s.iovs = s.iovs[:0]
	// First the room: which packets fit, and their cut frames' headers.
	nmsg, nhdr := 0, 0
	np := 0
	for _, pkt := range pkts {
		f, cut := frames(pkt, vnetHdr)
		if np > 0 && nmsg+f > len(s.msgs) {
			break
		}
		np++
		nmsg += f
		if cut {
			nhdr += f * headersLen(pkt)
		}
	}
	if nmsg > len(s.msgs) { // a lone super-segment with more frames
		s.msgs = make([]unix.Mmsghdr, nmsg)
		s.starts = make([]int, nmsg)
		s.lasts = make([]bool, nmsg)
		s.sizes = make([]int, nmsg)
	}
	if nhdr > cap(s.hdrs) {
		s.hdrs = make([]byte, 0, nhdr)
	}
	s.hdrs = s.hdrs[:0]
	m := 0
	for i, pkt := range pkts[:np] {
		if _, cut := frames(pkt, vnetHdr); cut {
			m = s.cut(pkt, m)
			continue
		}
		start := len(s.iovs)
		s.starts[m] = start
		s.lasts[m] = true
		s.sizes[m] = pkt.Size()
		m++
		if vnetHdr {
			h := s.vhdrs[i*vnet.HeaderSize : (i+1)*vnet.HeaderSize]
			vnet.ForTX(pkt, linkHdrLen).Encode(h)
			s.iovs = appendIovec(s.iovs, h)
		}
		body := len(s.iovs)
		views, off := pkt.AsViewList()
		for v := views.Front(); v != nil; v = v.Next() {
			b := v.AsSlice()
			if off >= len(b) {
				off -= len(b)
				continue
			}
			s.iovs = appendIovec(s.iovs, b[off:])
			off = 0
		}
		if len(s.iovs)-start > maxIovPerMsg {
			// Pathologically fragmented: send a flat copy instead.
			s.iovs = s.iovs[:body]
			flat := pkt.ToView()
			s.flat = append(s.flat, flat)
			s.iovs = appendIovec(s.iovs, flat.AsSlice())
		}
	}
	// s.iovs has stopped growing: now its addresses are stable.
	for i := range m {
		end := len(s.iovs)
		if i+1 < m {
			end = s.starts[i+1]
		}
		mh := &s.msgs[i]
		*mh = unix.Mmsghdr{}
		if end > s.starts[i] {
			mh.Hdr.Iov = &s.iovs[s.starts[i]]
			mh.Hdr.SetIovlen(end - s.starts[i])
		}
	}
	return s.msgs[:m]
}

// headersLen is the length of pkt's link, network and transport headers.
func headersLen(pkt *stack.PacketBuffer) int {
	return len(pkt.LinkHeader().Slice()) + len(pkt.NetworkHeader().Slice()) + len(pkt.TransportHeader().Slice())
}

// cut adds the frames of the TCP super-segment pkt as messages from m on
// and returns the next message's index. Each frame has a copy of pkt's
// headers with its own IP length (and IPv4 identification and header
// checksum), sequence number, flags (FIN and PSH only on the last, CWR
// only on the first) and complete TCP checksum, then iovecs on its share
// of the payload: at most the MSS, all of it left for the last.
func (s *txScratch) cut(pkt *stack.PacketBuffer, m int) int {
	eth := pkt.LinkHeader().Slice()
	nh := pkt.NetworkHeader().Slice()
	th := pkt.TransportHeader().Slice()
	hl := len(eth) + len(nh) + len(th)
	n, _ := frames(pkt, false)
	mss := int(pkt.GSOOptions.MSS)
	left := pkt.Data().Size()
	views, off := pkt.AsViewList()
	off += hl // the payload's start in the first view
	v := views.Front()
	for i := range n {
		plen := left
		if i < n-1 {
			plen = mss
		}
		left -= plen
		flen := plen
		h := s.hdrs[len(s.hdrs) : len(s.hdrs)+hl : len(s.hdrs)+hl]
		s.hdrs = s.hdrs[:len(s.hdrs)+hl]
		copy(h, eth)
		copy(h[len(eth):], nh)
		copy(h[len(eth)+len(nh):], th)
		ip, tcp := h[len(eth):len(eth)+len(nh)], header.TCP(h[len(eth)+len(nh):])
		var src, dst tcpip.Address
		if header.IPVersion(ip) == header.IPv4Version {
			ip4 := header.IPv4(ip)
			ip4.SetTotalLength(uint16(len(nh) + len(th) + plen))
			ip4.SetID(ip4.ID() + uint16(i))
			ip4.SetChecksum(0)
			ip4.SetChecksum(^ip4.CalculateChecksum())
			src, dst = ip4.SourceAddress(), ip4.DestinationAddress()
		} else {
			ip6 := header.IPv6(ip)
			ip6.SetPayloadLength(uint16(len(nh) - header.IPv6MinimumSize + len(th) + plen))
			src, dst = ip6.SourceAddress(), ip6.DestinationAddress()
		}
		tcp.SetSequenceNumber(tcp.SequenceNumber() + uint32(i*mss))
		flags := tcp.Flags()
		if i < n-1 {
			flags &^= header.TCPFlagFin | header.TCPFlagPsh
		}
		if i > 0 {
			flags &^= header.TCPFlagCwr
		}
		tcp.SetFlags(uint8(flags))
		tcp.SetChecksum(0)
		var c checksum.Checksumer
		c.Add(tcp)
		s.starts[m] = len(s.iovs)
		s.lasts[m] = i == n-1
		s.sizes[m] = hl + flen
		m++
		s.iovs = appendIovec(s.iovs, h)
		body, fv, foff := len(s.iovs), v, off
		for plen > 0 && v != nil {
			b := v.AsSlice()
			if off >= len(b) {
				off -= len(b)
				v = v.Next()
				continue
			}
			b = b[off:min(len(b), off+plen)]
			c.Add(b)
			s.iovs = appendIovec(s.iovs, b)
			off += len(b)
			plen -= len(b)
		}
		if len(s.iovs)-s.starts[m-1] > maxIovPerMsg {
			// Pathologically fragmented (a payload of many tiny
			// writes): the frame's payload goes as one flat copy.
			s.iovs = s.iovs[:body]
			flat := buffer.NewViewSize(flen)
			s.flat = append(s.flat, flat)
			copyPayload(flat.AsSlice(), fv, foff)
			s.iovs = appendIovec(s.iovs, flat.AsSlice())
		}
		xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)+flen))
		tcp.SetChecksum(^checksum.Combine(xsum, c.Checksum()))
	}
	return m
}

// copyPayload fills dst from the packet views starting at v, off bytes
// into it.
func copyPayload(dst []byte, v *buffer.View, off int) {
	for len(dst) > 0 && v != nil {
		b := v.AsSlice()
		if off < len(b) {
			n := copy(dst, b[off:])
			dst = dst[n:]
			off = 0
		} else {
			off -= len(b)
		}
		v = v.Next()
	}
}

func appendIovec(iovs []unix.Iovec, b []byte) []unix.Iovec {
	if len(b) == 0 {
		return iovs
	}
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	return append(iovs, iov)
}

// clear drops the scratch's pointers into packets, so that a pooled
// scratch keeps no packet memory alive, and releases flat copies.
func (s *txScratch) clear() {
	clear(s.iovs)
	s.iovs = s.iovs[:0]
	for i := range s.msgs {
		s.msgs[i].Hdr.Iov = nil
	}
	for _, v := range s.flat {
		v.Release()
	}
	clear(s.flat)
	s.flat = s.flat[:0]
	s.pending = nil
}

// watchLoop is the queue's writability watcher goroutine, started by the
// queue's first refused write (linkutil.Watcher) and joined by Close.
func (q *queue) watchLoop() {
	defer q.e.wg.Done()
	q.watch.WatchLoop(q.rc, q.e.stop, q.e.notifyWritable)
}
