package pktio

import (
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

// txQueue is the bounded FIFO of packets the stack sent and the consumer
// has not read yet.
type txQueue struct {
	mu      sync.Mutex
	cond    sync.Cond           // Read waits on it for packets or Close
	pkts    linkutil.PacketRing // each holds one reference taken at write
	closed  bool
	readers int // Reads waiting on cond

	// writable, if set, is called after Read frees room following a
	// refused write (wantWritable), so a qdisc can resume.
	writable     func()
	wantWritable bool

	packets, bytes, calls, full, closedCount uint64
}

func (q *txQueue) init(size int) {
	q.pkts = linkutil.NewPacketRing(size)
	q.cond.L = &q.mu
}

func (q *txQueue) shut() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *txQueue) addClosed(n int) {
	q.mu.Lock()
	q.closedCount += uint64(n)
	q.mu.Unlock()
}

// release drops what the queue holds and returns how many packets that
// was. Only after shut.
func (q *txQueue) release() int {
	q.mu.Lock()
	drop := q.pkts.Drain(nil)
	q.mu.Unlock()
	for _, p := range drop {
		p.DecRef()
	}
	return len(drop)
}

// WritePackets implements stack.LinkWriter. It queues as many packets as
// the queue towards the consumer has room for, taking a reference to
// each; the caller keeps its own references and the list. If the queue
// fills, it returns how many it took and ErrNoBufferSpace, and the rest
// stay the caller's (counted in TXFull): the qdisc requeues them and
// NotifyWritable's function tells it when Read has made room. After Close
// it takes nothing and returns ErrClosedForSend.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	list := pkts.AsSlice()
	if len(list) == 0 {
		return 0, nil
	}
	q := &e.tx
	q.mu.Lock()
	q.calls++
	if q.closed {
		q.closedCount += uint64(len(list))
		q.mu.Unlock()
		return 0, &tcpip.ErrClosedForSend{}
	}
	n, bytes := q.pkts.PushRefs(list)
	q.packets += uint64(n)
	q.bytes += uint64(bytes)
	refused := len(list) - n
	if refused > 0 {
		q.full += uint64(refused)
		q.wantWritable = true
	}
	if n > 0 && q.readers > 0 {
		q.cond.Signal()
	}
	q.mu.Unlock()
	if refused > 0 {
		return n, &tcpip.ErrNoBufferSpace{}
	}
	return n, nil
}

// NotifyRounds implements sched.RoundNotifier: a discipline's begin and
// end hooks wrap each receive round that delivers a packet (after GRO's
// flush), so what the round's delivery writes (ACKs and replies sent
// inline) is handed to Read in one flush at its end.
func (e *Endpoint) NotifyRounds(begin, end func()) { e.rounds.Set(begin, end) }

// NotifyWritable implements sched.WritableNotifier: after a write the
// queue refused, f is called once Read has made room, from Read's
// goroutine, with no lock of the endpoint held.
func (e *Endpoint) NotifyWritable(f func()) {
	e.tx.mu.Lock()
	e.tx.writable = f
	e.tx.mu.Unlock()
}

// Backlog returns how many packets the stack sent that no Read has taken
// yet.
func (e *Endpoint) Backlog() int {
	e.tx.mu.Lock()
	defer e.tx.mu.Unlock()
	return e.tx.pkts.Len()
}

// Read takes packets the stack sent and copies them into bufs, each at
// bufs[i][offset:], with its length in sizes[i]; it returns how many
// buffers it filled, at least one. It blocks until there is a packet to
// hand out or the endpoint is closed (ErrClosed). len(sizes) must be at
// least len(bufs). This is tun.Device.Read of wireguard-go.
//
// A TCP super-segment is cut into segments of at most the MTU, each with
// its IP and TCP headers and checksums complete, one buffer each; if bufs
// run out in the middle of one, the next Read goes on where this one
// stopped. With Options.VNetHeader every buffer starts with a virtio-net
// header at offset, followed by the packet at offset+vnet.HeaderSize, and
// a super-segment goes whole if the buffer holds it (its TCP checksum
// then partial, for the consumer to complete, as the header says).
//
// A packet larger than its buffer is dropped and counted (TXErrors,
// Counters.ReadTooBig). The buffers are the caller's; nothing keeps them
// after Read returns. Reads from several goroutines take turns.
func (e *Endpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	e.readMu.Lock()
	defer e.readMu.Unlock()
	for {
		if e.closed.Load() {
			return 0, ErrClosed
		}
		out := 0
		if e.carry != nil {
			out = e.emitCarry(bufs, sizes, offset)
		}
		if out < len(bufs) && e.carry == nil {
			out += e.readQueued(bufs[out:], sizes[out:], offset)
		}
		if out > 0 {
			e.readCalls.Add(1)
			e.readPackets.Add(uint64(out))
			return out, nil
		}
		q := &e.tx
		q.mu.Lock()
		for q.pkts.Len() == 0 && !q.closed {
			q.readers++
			q.cond.Wait()
			q.readers--
		}
		q.mu.Unlock()
	}
}

// emitCarry hands out what is left of a super-segment a previous Read
// cut only in part. Called with readMu held.
func (e *Endpoint) emitCarry(bufs [][]byte, sizes []int, offset int) int {
	n, next, done := e.emit(e.carry, e.carrySeg, bufs, sizes, offset)
	if done {
		e.carry.DecRef()
		e.carry, e.carrySeg = nil, 0
	} else {
		e.carrySeg = next
	}
	return n
}

// readQueued takes from the queue as many packets as bufs can hold and
// hands them out, returning how many buffers it filled. Called with
// readMu held and no carry.
func (e *Endpoint) readQueued(bufs [][]byte, sizes []int, offset int) int {
	capacity := len(bufs[0]) - offset
	q := &e.tx
	q.mu.Lock()
	k, room := 0, len(bufs)
	for p := q.pkts.Peek(); p != nil && room > 0; p = q.pkts.Peek() {
		need := e.outputs(p, capacity)
		if need > room && k > 0 {
			break // the next Read takes it whole
		}
		q.pkts.Pop()
		e.taken[k] = p
		k++
		room -= need
	}
	var writable func()
	if k > 0 && q.wantWritable && q.pkts.Room() >= q.pkts.WakeRoom() {
		q.wantWritable = false
		writable = q.writable
	}
	q.mu.Unlock()
	if writable != nil {
		writable()
	}
	out := 0
	for i := 0; i < k; i++ {
		p := e.taken[i]
		e.taken[i] = nil
		n, next, done := e.emit(p, 0, bufs[out:], sizes[out:], offset)
		out += n
		if done {
			p.DecRef()
		} else {
			// Only the last packet taken can be cut short: the others
			// were taken because they fit.
			e.carry, e.carrySeg = p, next
		}
	}
	return out
}

// isTSO reports whether pkt is a TCP segment the stack left for the
// device to cut and checksum (host GSO).
func isTSO(pkt *stack.PacketBuffer) bool {
	t := pkt.GSOOptions.Type
	return t == stack.GSOTCPv4 || t == stack.GSOTCPv6
}

// whole reports whether pkt goes out as it is in a buffer of capacity
// bytes: anything but a TSO segment, and with VNetHeader a TSO segment
// that fits.
func (e *Endpoint) whole(pkt *stack.PacketBuffer, capacity int) bool {
	if !isTSO(pkt) {
		return true
	}
	return e.opts.VNetHeader && vnet.HeaderSize+pkt.Size() <= capacity
}

// tsoHeaderLen is the length of a TSO segment's IP and TCP headers.
func tsoHeaderLen(pkt *stack.PacketBuffer) int {
	l4 := pkt.TransportHeader().Slice()
	tcpLen := header.TCPMinimumSize
	if len(l4) >= header.TCPMinimumSize {
		tcpLen = int(header.TCP(l4).DataOffset())
	}
	return int(pkt.GSOOptions.L3HdrLen) + tcpLen
}

// outputs is how many buffers of capacity bytes pkt takes.
func (e *Endpoint) outputs(pkt *stack.PacketBuffer, capacity int) int {
	if e.whole(pkt, capacity) {
		return 1
	}
	payload := pkt.Size() - tsoHeaderLen(pkt)
	mss := max(int(pkt.GSOOptions.MSS), 1)
	return max((payload+mss-1)/mss, 1)
}

// emit hands pkt out into bufs from segment seg on, and returns how many
// buffers it filled, the next segment, and whether pkt is done with.
func (e *Endpoint) emit(pkt *stack.PacketBuffer, seg int, bufs [][]byte, sizes []int, offset int) (int, int, bool) {
	hdr := 0
	if e.opts.VNetHeader {
		hdr = vnet.HeaderSize
	}
	if e.whole(pkt, len(bufs[0])-offset) {
		dst := bufs[0][offset:]
		size := pkt.Size()
		if hdr+size > len(dst) {
			e.txTooBig.Add(1)
			return 0, 0, true
		}
		if hdr > 0 {
			vnet.ForTX(pkt, 0).Encode(dst)
		}
		copyOut(dst[hdr:hdr+size], pkt, 0)
		sizes[0] = hdr + size
		return 1, 0, true
	}
	hlen := tsoHeaderLen(pkt)
	l3 := int(pkt.GSOOptions.L3HdrLen)
	payload := pkt.Size() - hlen
	mss := max(int(pkt.GSOOptions.MSS), 1)
	nseg := max((payload+mss-1)/mss, 1)
	if seg == 0 {
		e.readSplit.Add(1)
	}
	n := 0
	for ; seg < nseg && n < len(bufs); seg++ {
		dst := bufs[n][offset:]
		start := seg * mss
		l := min(mss, payload-start)
		if hdr+hlen+l > len(dst) {
			e.txTooBig.Add(1)
			return n, 0, true
		}
		if hdr > 0 {
			vnet.Header{}.Encode(dst)
			dst = dst[hdr:]
		}
		dst = dst[:hlen+l]
		copyOut(dst[:hlen], pkt, 0)
		copyOut(dst[hlen:], pkt, hlen+start)
		finishSegment(dst, l3, seg, start, seg == nseg-1)
		sizes[n] = hdr + hlen + l
		n++
	}
	return n, seg, seg == nseg
}

// finishSegment makes b, the headers of a TSO super-segment followed by
// the payload that starts start bytes into it, a segment of its own:
// the IP length and (IPv4) identification and checksum, the TCP sequence
// number, FIN and PSH only on the last segment, and the full TCP
// checksum in place of the partial one.
func finishSegment(b []byte, l3, seg, start int, last bool) {
	var src, dst tcpip.Address
	switch header.IPVersion(b) {
	case header.IPv4Version:
		ip := header.IPv4(b)
		ip.SetTotalLength(uint16(len(b)))
		ip.SetID(ip.ID() + uint16(seg))
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		ip := header.IPv6(b)
		ip.SetPayloadLength(uint16(len(b) - header.IPv6MinimumSize))
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	}
	tcp := header.TCP(b[l3:])
	tcp.SetSequenceNumber(tcp.SequenceNumber() + uint32(start))
	if !last {
		tcp.SetFlags(uint8(tcp.Flags() &^ (header.TCPFlagFin | header.TCPFlagPsh)))
	}
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
}

// copyOut copies len(dst) bytes of pkt, from byte from on, into dst,
// walking the packet's views without flattening it.
func copyOut(dst []byte, pkt *stack.PacketBuffer, from int) {
	vl, off := pkt.AsViewList()
	off += from
	n := 0
	for v := vl.Front(); v != nil && n < len(dst); v = v.Next() {
		s := v.AsSlice()
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n += copy(dst[n:], s[off:])
		off = 0
	}
}
