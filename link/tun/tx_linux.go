//go:build linux

package tun

import (
	"os"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/vnet"
)

// WritePackets implements stack.LinkWriter. It writes each packet with one
// writev to the queue its flow hashes to: with the virtio-net header from
// vnet.ForTX in front (a super-segment goes whole, for the kernel to
// segment), then the packet's own views, uncopied. The caller keeps its
// references and the list; the device has copied what it accepted by the
// time the call returns.
//
// It stops at the first packet it cannot write and returns how many it
// wrote with the reason: ErrNoBufferSpace when the device is full (the rest
// stay the caller's, counted in TXFull, and NotifyWritable's function is
// called once there is room); ErrClosedForSend after Close (TXClosed) or
// once the device is gone (the rest are dropped, counted in TXErrors, and
// Err says why); or the error of a packet the device refused (that one
// packet is dropped and counted in TXErrors, the rest are not tried).
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	e.txCalls.Add(1)
	s := e.txPool.Get().(*txScratch)
	n, err := e.writePackets(s, pkts.AsSlice())
	e.txPool.Put(s)
	return n, err
}

// writePackets is WritePackets with a scratch to write from: each run of
// packets bound for one queue is written in one trip through the queue's
// RawConn.
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
		if e.err.Load() != nil {
			q.txErrors.Add(uint64(len(list) - sent))
			return sent, &tcpip.ErrClosedForSend{}
		}
		n, errno := q.send(s, list[sent:end])
		sent += n
		if errno != 0 {
			return sent, q.refused(len(list)-sent, errno)
		}
	}
	return sent, nil
}

// txQueue picks the queue that writes pkt, by its flow hash, so every flow
// leaves through one queue and keeps its order.
func (e *Endpoint) txQueue(pkt *stack.PacketBuffer) int {
	return link.QueueIndex(link.PacketFlowHash(pkt), len(e.queues))
}

// send writes pkts to the queue, one writev each, in one trip through the
// queue's RawConn. It returns how many were written and, if it stopped
// short, the errno that stopped it (EBADF once closed).
func (q *queue) send(s *txScratch, pkts []*stack.PacketBuffer) (int, unix.Errno) {
	s.q, s.pkts, s.n, s.bytes, s.super, s.errno = q, pkts, 0, 0, 0, 0
	err := q.rc.Control(s.sendFn)
	n := s.n
	q.txPackets.Add(uint64(n))
	q.txBytes.Add(s.bytes)
	if s.super > 0 {
		q.e.txSuper.Add(s.super)
	}
	errno := s.errno
	s.q, s.pkts = nil, nil // keep no packet alive from the pool
	if err != nil {
		return n, unix.EBADF
	}
	return n, errno
}

// refused accounts for the rest packets that a send on q stopped short of
// because of errno, and translates errno for the writer.
func (q *queue) refused(rest int, errno unix.Errno) tcpip.Error {
	switch errno {
	case unix.EAGAIN:
		// Full: the writer keeps the rest and hears from the watcher.
		q.txFull.Add(uint64(rest))
		q.watch.Refused(&q.e.Lifecycle, q.startWatch)
		return &tcpip.ErrNoBufferSpace{}
	case unix.EBADF:
		q.txClosed.Add(uint64(rest))
		return &tcpip.ErrClosedForSend{}
	case unix.EBADFD, unix.ENXIO, unix.ENODEV:
		// The device was deleted: the queue is detached for good.
		q.e.failGone(os.NewSyscallError("writev", errno))
		q.txErrors.Add(uint64(rest))
		return &tcpip.ErrClosedForSend{}
	default:
		q.txErrors.Add(1)
		return tcpip.TranslateErrno(errno)
	}
}

// txScratch is what one WritePackets call needs for its writes: the
// virtio-net header of the packet being written, and the loop that writes
// a run of packets, bound once to the scratch so that a trip through the
// queue's RawConn allocates nothing. Scratches live in the endpoint's
// pool; concurrent calls use different ones.
type txScratch struct {
	hdr    [vnet.HeaderSize]byte
	q      *queue
	pkts   []*stack.PacketBuffer // the run being written; borrowed
	n      int                   // packets of pkts written
	bytes  uint64                // their bytes
	super  uint64                // how many of them were GSO super-segments
	errno  unix.Errno            // what stopped the run, or 0
	sendFn func(fd uintptr)      // s.send, bound once
}

func newTXScratch() *txScratch {
	s := &txScratch{}
	s.sendFn = s.send
	return s
}

// send writes s.pkts from s.n on, one writev each, until one fails.
func (s *txScratch) send(fd uintptr) {
	vnetHdr := s.q.e.offloads.VNetHeader
	for s.n < len(s.pkts) {
		if s.q.ring != nil && len(s.pkts)-s.n > 1 {
			// Several packets: one trip through the ring for all.
			n, errno, ok := s.q.ring.write(int(fd), s.pkts[s.n:])
			if ok {
				s.q.txSyscalls.Add(1)
				for _, pkt := range s.pkts[s.n : s.n+n] {
					s.bytes += uint64(pkt.Size())
				}
				s.n += n
				if errno != 0 && errno != unix.EINTR {
					s.errno = errno
					return
				}
				continue
			}
		}
		pkt := s.pkts[s.n]
		hdr := s.hdr[:0]
		gso := false
		if vnetHdr {
			h := vnet.ForTX(pkt, s.q.e.linkHdr)
			h.Encode(s.hdr[:])
			hdr, gso = s.hdr[:], h.IsGSO()
		}
		errno := writePacket(int(fd), hdr, pkt)
		s.q.txSyscalls.Add(1)
		switch errno {
		case 0:
			s.n++
			s.bytes += uint64(pkt.Size())
			if gso {
				s.super++
			}
		case unix.EINTR:
		default:
			s.errno = errno
			return
		}
	}
}

// watchLoop is the queue's writability watcher goroutine, started by the
// queue's first refused write (linkutil.Watcher) and joined by Close.
func (q *queue) watchLoop() {
	defer q.e.wg.Done()
	q.watch.WatchLoop(q.rc, q.e.stop, q.e.notifyWritable)
}
