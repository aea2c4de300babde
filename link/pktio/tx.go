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
// A TCP super-segment is cut into segments that fill the MTU, each with
// its IP and TCP headers and checksums complete, one buffer each: every
// segment but the last is exactly MTU bytes, whatever TCP options it
// carries, unless the connection's segments are bounded below the MTU
// (the peer's MSS, the path's MTU: see segmentPayload), when they carry
// the payload gVisor asked for. No packet Read hands out is larger than
// the MTU. If bufs run out in the middle of a super-segment, the next
// Read goes on where this one stopped. With Options.VNetHeader every
// buffer starts with a virtio-net header at offset, followed by the
// packet at offset+vnet.HeaderSize, and a super-segment goes whole if
// the buffer holds it (its TCP checksum then partial, for the consumer
// to complete, as the header says).
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
	n, next, done := e.emitSegments(e.carry, &e.carryCut, e.carrySeg, bufs, sizes, offset)
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
	mtu := int(e.mtu.Load())
	q := &e.tx
	q.mu.Lock()
	k, room := 0, len(bufs)
	for p := q.pkts.Peek(); p != nil && room > 0; p = q.pkts.Peek() {
		need := 1
		if !e.whole(p, capacity) {
			e.cuts[k] = cutFor(p, mtu)
			need = e.cuts[k].n
		}
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
		if e.whole(p, capacity) {
			out += e.emitWhole(p, bufs[out][offset:], &sizes[out])
			p.DecRef()
			continue
		}
		n, next, done := e.emitSegments(p, &e.cuts[i], 0, bufs[out:], sizes[out:], offset)
		out += n
		if done {
			p.DecRef()
		} else {
			// Only the last packet taken can be cut short: the others
			// were taken because they fit.
			e.carry, e.carryCut, e.carrySeg = p, e.cuts[i], next
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

// cut is how Read cuts a TSO super-segment. It is decided once, when
// Read takes the packet, so that a super-segment handed out over several
// Reads is cut one way.
type cut struct {
	l3   int // the IP header's length
	hlen int // the IP and TCP headers' length
	size int // the payload of every segment but the last
	n    int // how many segments, and buffers, it makes
}

// cutFor decides how the TSO super-segment pkt is cut on a link of mtu
// bytes.
func cutFor(pkt *stack.PacketBuffer, mtu int) cut {
	l3 := int(pkt.GSOOptions.L3HdrLen)
	tcp := pkt.TransportHeader().Slice()
	tcpLen := header.TCPMinimumSize
	if len(tcp) >= header.TCPMinimumSize {
		tcpLen = min(max(int(header.TCP(tcp).DataOffset()), header.TCPMinimumSize), len(tcp))
	}
	hlen := l3 + tcpLen
	var opts []byte
	if len(tcp) >= tcpLen {
		opts = tcp[header.TCPMinimumSize:tcpLen]
	}
	size := segmentPayload(int(pkt.GSOOptions.MSS), mtu, l3, hlen, opts)
	payload := pkt.Size() - hlen
	return cut{l3: l3, hlen: hlen, size: size, n: max((payload+size-1)/size, 1)}
}

// The option room gVisor's TCP reserves in every segment it sends, and
// takes off the MSS it hands a GSO link, whatever options the segment
// carries (RFC 6691; tcp.Endpoint.maxOptionSize, which encodes the
// options with the most SACK blocks): a timestamp with its two NOPs, 12
// bytes; and, where SACK was agreed, two NOPs, the SACK option's 2 bytes
// and as many 8-byte blocks as then fit in TCP's 40 bytes of options:
// three after a timestamp (28 bytes), four without (36).
const (
	tsRoom     = 2 + header.TCPOptionTSLength
	sackRoomTS = 2 + 2 + 3*8
	sackRoom   = 2 + 2 + 4*8
)

// segmentPayload returns how many payload bytes each segment of a TSO
// super-segment carries, but the last, on a link of mtu bytes: as many
// as fill the MTU next to the segment's headers (hlen bytes, l3 of them
// IP, with the TCP options opts), when gVisor's mss shows that the MTU
// is what bounds the connection's segments; mss otherwise, and never
// more than the MTU allows.
//
// gVisor's mss is the smaller of what the route's MTU allows and the
// peer's MSS, less the option room it reserves for timestamps and SACK
// blocks, which most segments do not carry (a bulk sender's carry a
// timestamp alone): cut at mss, a 1420-byte link carries 1392-byte
// packets. Which room it reserved is not in the packet: the timestamp
// is, but whether SACK was agreed shows only in a segment that carries
// SACK blocks. So mss is compared with what the MTU allows less each
// room the segment's options leave possible; a match means the MTU
// bounds the segments, and the room the segment does not use is filled.
// No match means something smaller bounds them (the peer's MSS, a path
// MTU learnt from ICMP, TCP_MAXSEG), and they are cut at mss, as gVisor
// asked.
//
// One case is ambiguous: on a connection with timestamps but without
// SACK (the peer refused it), a bound exactly 28 bytes below the MTU's
// (36 without timestamps either) gives the mss the MTU gives with SACK,
// and segments are cut 28 (36) bytes larger than that bound. Peers that
// take timestamps but refuse SACK are rare (Linux, Windows, macOS and
// gVisor offer both); a peer's MSS is a limit it seldom enforces; a
// path MTU that exact would make the connection's full-sized segments
// go on being refused.
func segmentPayload(mss, mtu, l3, hlen int, opts []byte) int {
	mss = max(mss, 1)
	full := mtu - hlen
	switch {
	case full <= 0:
		return mss
	case full <= mss:
		return full // never larger than the MTU
	}
	ts, blocks := scanTCPOptions(opts)
	rooms := [2]int{0, sackRoom}
	switch {
	case ts && blocks > 0:
		rooms = [2]int{tsRoom + sackRoomTS, tsRoom + sackRoomTS}
	case ts:
		rooms = [2]int{tsRoom, tsRoom + sackRoomTS}
	case blocks > 0:
		rooms = [2]int{sackRoom, sackRoom}
	}
	bound := mtu - l3 - header.TCPMinimumSize // gVisor's mss before the room, if the MTU bounds it
	for _, room := range rooms {
		if mss == bound-room {
			return full
		}
	}
	return mss
}

// scanTCPOptions reports whether the TCP options opts carry a timestamp,
// and how many SACK blocks. It stops at anything malformed.
func scanTCPOptions(opts []byte) (ts bool, sackBlocks int) {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case header.TCPOptionEOL:
			return ts, sackBlocks
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 {
			return ts, sackBlocks
		}
		l := int(opts[i+1])
		switch opts[i] {
		case header.TCPOptionTS:
			ts = true
		case header.TCPOptionSACK:
			sackBlocks = (l - 2) / 8
		}
		i += l
	}
	return ts, sackBlocks
}

// emitWhole copies pkt into dst, behind a virtio-net header with
// VNetHeader, puts the length in *size and returns 1; or, if dst is too
// small, counts the drop and returns 0.
func (e *Endpoint) emitWhole(pkt *stack.PacketBuffer, dst []byte, size *int) int {
	hdr := 0
	if e.opts.VNetHeader {
		hdr = vnet.HeaderSize
	}
	n := pkt.Size()
	if hdr+n > len(dst) {
		e.txTooBig.Add(1)
		return 0
	}
	if hdr > 0 {
		vnet.ForTX(pkt, 0).Encode(dst)
	}
	copyOut(dst[hdr:hdr+n], pkt, 0)
	*size = hdr + n
	return 1
}

// emitSegments hands the TSO super-segment pkt, cut as c says, out into
// bufs from segment seg on, and returns how many buffers it filled, the
// next segment, and whether pkt is done with.
func (e *Endpoint) emitSegments(pkt *stack.PacketBuffer, c *cut, seg int, bufs [][]byte, sizes []int, offset int) (int, int, bool) {
	hdr := 0
	if e.opts.VNetHeader {
		hdr = vnet.HeaderSize
	}
	payload := pkt.Size() - c.hlen
	if seg == 0 {
		e.readSplit.Add(1)
	}
	n := 0
	for ; seg < c.n && n < len(bufs); seg++ {
		dst := bufs[n][offset:]
		start := seg * c.size
		l := min(c.size, payload-start)
		if hdr+c.hlen+l > len(dst) {
			e.txTooBig.Add(1)
			return n, 0, true
		}
		if hdr > 0 {
			vnet.Header{}.Encode(dst)
			dst = dst[hdr:]
		}
		dst = dst[:c.hlen+l]
		copyOut(dst[:c.hlen], pkt, 0)
		copyOut(dst[c.hlen:], pkt, c.hlen+start)
		finishSegment(dst, c.l3, seg, start, seg == c.n-1)
		sizes[n] = hdr + c.hlen + l
		n++
	}
	return n, seg, seg == c.n
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
