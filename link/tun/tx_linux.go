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

// txOutcome classifies one write.
type txOutcome int

const (
	txSent   txOutcome = iota
	txFull             // EAGAIN: no room now; retry after NotifyWritable
	txClosed           // the endpoint was closed
	txGone             // the device is gone: nothing more will leave
	txFailed           // this packet failed; the next one may not
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
	s.pkt = nil // keep no packet alive from the pool
	e.txPool.Put(s)
	return n, err
}

// writePackets is WritePackets with a scratch to write from.
func (e *Endpoint) writePackets(s *txScratch, list []*stack.PacketBuffer) (int, tcpip.Error) {
	nq := len(e.queues)
	for i, pkt := range list {
		q := e.queues[0]
		if nq > 1 {
			q = e.queues[link.QueueIndex(link.PacketFlowHash(pkt), nq)]
		}
		if e.err.Load() != nil {
			q.txErrors.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		}
		var h vnet.Header
		if e.offloads.VNetHeader {
			h = vnet.ForTX(pkt, 0)
		}
		out, terr := q.write(s, h, pkt)
		switch out {
		case txSent:
			q.txPackets.Add(1)
			q.txBytes.Add(uint64(pkt.Size()))
			if h.IsGSO() {
				e.txSuper.Add(1)
			}
			continue
		case txFull:
			q.txFull.Add(uint64(len(list) - i))
			q.watch.Refused(&e.Lifecycle, q.startWatch)
			return i, &tcpip.ErrNoBufferSpace{}
		case txClosed:
			q.txClosed.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		case txGone:
			q.txErrors.Add(uint64(len(list) - i))
			return i, &tcpip.ErrClosedForSend{}
		default:
			q.txErrors.Add(1)
			return i, terr
		}
	}
	return len(list), nil
}

// txScratch is what one WritePackets call needs for its writes: the
// virtio-net header of the packet being written, and the write itself,
// bound once to the scratch so that a write through the queue's RawConn
// allocates nothing. Scratches live in the endpoint's pool; concurrent
// calls use different ones.
type txScratch struct {
	hdr     [vnet.HeaderSize]byte
	nhdr    int                 // bytes of hdr to write: 0 without the virtio-net header
	pkt     *stack.PacketBuffer // the packet being written; borrowed for the write
	errno   unix.Errno          // writeFn's result
	writeFn func(fd uintptr)    // writes hdr[:nhdr] and pkt
}

func newTXScratch() *txScratch {
	s := &txScratch{}
	s.writeFn = func(fd uintptr) { s.errno = writePacket(int(fd), s.hdr[:s.nhdr], s.pkt) }
	return s
}

// write writes one packet behind header h to the queue, from scratch s.
func (q *queue) write(s *txScratch, h vnet.Header, pkt *stack.PacketBuffer) (txOutcome, tcpip.Error) {
	s.nhdr = 0
	if q.e.offloads.VNetHeader {
		h.Encode(s.hdr[:])
		s.nhdr = vnet.HeaderSize
	}
	s.pkt = pkt
	for {
		if q.rc.Control(s.writeFn) != nil {
			return txClosed, nil
		}
		q.txSyscalls.Add(1)
		if s.errno != unix.EINTR {
			break
		}
	}
	switch s.errno {
	case 0:
		return txSent, nil
	case unix.EAGAIN:
		return txFull, nil
	case unix.EBADFD, unix.ENXIO, unix.ENODEV:
		// The device was deleted: the queue is detached for good.
		q.e.failGone(os.NewSyscallError("writev", s.errno))
		return txGone, nil
	}
	return txFailed, tcpip.TranslateErrno(s.errno)
}

// watchLoop is the queue's writability watcher goroutine, started by the
// queue's first refused write (linkutil.Watcher) and joined by Close.
func (q *queue) watchLoop() {
	defer q.e.wg.Done()
	q.watch.WatchLoop(q.rc, q.e.stop, q.e.notifyWritable)
}
