//go:build linux

package afpacket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
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

// queue is one AF_PACKET socket: its receive goroutine, its writability
// watcher and its share of the counters. Its file is the socket; every
// system call on it goes through rc, so Close cannot reuse the descriptor
// under a call in progress.
type queue struct {
	e    *Endpoint
	idx  int
	file *os.File
	rc   syscall.RawConn
	// want carries one pending request to the watcher: a write was refused
	// because the socket was full.
	want chan struct{}
	// gate serialises receive rounds between the receive goroutine and
	// busy-polling readers; whoever holds gate.Owner uses the landing
	// ring: rxr with the cache off; with it on, rxIt, taken from rxCache
	// (whose owner is the holder of gate.Owner) for a run of rounds and
	// put back, parked, when the receive goroutine finds the socket empty,
	// so that an idle queue's ring is released after cache.DefaultIdleAfter.
	gate    linkutil.PollGate
	rxr     *rxRing
	rxCache *cache.Cache[*rxRing]
	rxIt    *cache.Item[*rxRing]
	// pollRecv is busyPoll's receive, bound once so that a round
	// allocates nothing; it leaves its result in pollN and pollErrno.
	pollRecv  func(fd uintptr)
	pollN     int
	pollErrno unix.Errno
	counters
}

// New opens an endpoint on the Ethernet interface ifname in the calling
// thread's network namespace: the process's, unless the goroutine is
// locked to a thread in another one, as inside netns.NS.Do. The sockets
// stay in that namespace wherever the endpoint is used from. A nil opts means DefaultOptions. The caller owns the endpoint and
// must Close it; stack.AddNIC takes that over on success.
//
// It needs CAP_NET_RAW. Errors say what failed: a missing interface, a
// missing privilege, or the system call that refused.
func New(ifname string, opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkIfName(ifname); err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("afpacket: interface %q not found: check `ip link`: %w", ifname, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afpacket: interface %q has no Ethernet address: afpacket needs an Ethernet interface (for a TUN device use link/tun)", ifname)
	}
	fds := make([]int, 0, o.Queues)
	fail := func(err error) (*Endpoint, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	fanoutID := 0
	for i := range o.Queues {
		fd, err := openSocket(ifname, ifi.Index, &o)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, fd)
		if o.Queues > 1 {
			if fanoutID, err = joinFanout(fd, i, fanoutID); err != nil {
				return fail(fmt.Errorf("afpacket: join %d sockets on %q in a fanout group: %w", o.Queues, ifname, err))
			}
		}
	}
	e, err := newEndpoint(ifname, ifi.Index, uint32(ifi.MTU), tcpip.LinkAddress(ifi.HardwareAddr), o, fds)
	if err != nil {
		return nil, err // newEndpoint closed the descriptors
	}
	return e, nil
}

// openSocket opens one packet socket, sets its options and binds it to
// the interface. It opens the socket for no protocol and binds it for all
// (ETH_P_ALL) together with the interface: a socket opened for ETH_P_ALL
// would start queueing every interface's frames before the bind.
func openSocket(ifname string, ifindex int, o *Options) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, sockErr(ifname, "open a packet socket", "socket", err)
	}
	set := func(level, opt, v int, name string) error {
		if err := unix.SetsockoptInt(fd, level, opt, v); err != nil {
			return sockErr(ifname, "set "+name, "setsockopt", err)
		}
		return nil
	}
	var errs []error
	if o.NoVnetHdr {
		// Without the virtio-net header the kernel's checksum status comes
		// only this way; it says which frames carry a partial checksum.
		errs = append(errs, set(unix.SOL_PACKET, unix.PACKET_AUXDATA, 1, "PACKET_AUXDATA"))
	} else {
		errs = append(errs, set(unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR (or set Options.NoVnetHdr)"))
	}
	if o.QdiscBypass {
		errs = append(errs, set(unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS"))
	}
	// Our own frames are not to be read back, and with this option the
	// kernel does not even clone them for us (Linux 4.20+; older kernels
	// refuse it, and rxLoop skips PACKET_OUTGOING frames anyway).
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil && !errors.Is(err, unix.ENOPROTOOPT) {
		errs = append(errs, sockErr(ifname, "set PACKET_IGNORE_OUTGOING", "setsockopt", err))
	}
	// A NIC passes up only the multicast groups the kernel joined, and
	// gVisor's IPv6 joins solicited-node groups the kernel knows nothing
	// of: without all-multicast, neighbour solicitations for ustack's
	// addresses would never arrive. The kernel drops the membership when
	// the socket closes.
	mreq := &unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_ALLMULTI}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		errs = append(errs, sockErr(ifname, "receive all multicast (PACKET_MR_ALLMULTI)", "setsockopt", err))
	}
	errs = append(errs,
		setBuf(fd, ifname, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.RcvBuf, "receive"),
		setBuf(fd, ifname, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.SndBuf, "send"))
	if err := errors.Join(errs...); err != nil {
		unix.Close(fd)
		return -1, err
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENODEV) {
			return -1, fmt.Errorf("afpacket: interface %q not found: check `ip link`: %w", ifname, os.NewSyscallError("bind", err))
		}
		return -1, sockErr(ifname, "bind a packet socket", "bind", err)
	}
	return fd, nil
}

// setBuf sets a socket buffer size with the FORCE option, which ignores
// net.core.[rw]mem_max but needs CAP_NET_ADMIN; without that privilege it
// falls back to the plain option, which the kernel caps at the maximum.
func setBuf(fd int, ifname string, force, plain, size int, what string) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size)
	if errors.Is(err, unix.EPERM) {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
	}
	if err != nil {
		return sockErr(ifname, fmt.Sprintf("set the %s buffer to %d bytes", what, size), "setsockopt", err)
	}
	return nil
}

// joinFanout puts the i-th socket into the endpoint's PACKET_FANOUT_HASH
// group. The first socket creates the group under an ID the kernel picks
// (PACKET_FANOUT_FLAG_UNIQUEID, so endpoints never collide), which the
// others then join; it returns the group's ID.
func joinFanout(fd, i, id int) (int, error) {
	if i == 0 {
		arg := (unix.PACKET_FANOUT_HASH | unix.PACKET_FANOUT_FLAG_UNIQUEID) << 16
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, arg); err != nil {
			return 0, os.NewSyscallError("setsockopt PACKET_FANOUT", err)
		}
		v, err := unix.GetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT)
		if err != nil {
			return 0, os.NewSyscallError("getsockopt PACKET_FANOUT", err)
		}
		return v & 0xffff, nil
	}
	arg := id | unix.PACKET_FANOUT_HASH<<16
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, arg); err != nil {
		return 0, os.NewSyscallError("setsockopt PACKET_FANOUT", err)
	}
	return id, nil
}

// sockErr wraps a failed system call, saying what to do about the usual
// cause.
func sockErr(ifname, what, call string, err error) error {
	se := os.NewSyscallError(call, err)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("afpacket: %s on %q: %w: run as root or grant CAP_NET_RAW", what, ifname, se)
	}
	return fmt.Errorf("afpacket: %s on %q: %w", what, ifname, se)
}

// htons converts a 16-bit value to network byte order.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// newEndpoint builds an endpoint over open, non-blocking sockets, one per
// queue, and starts a writability watcher for each. It owns fds from the
// call on, closing them on error. Tests call it with socketpairs.
func newEndpoint(ifname string, ifindex int, mtu uint32, addr tcpip.LinkAddress, o Options, fds []int) (*Endpoint, error) {
	e := &Endpoint{
		opts:    o,
		ifname:  ifname,
		ifindex: ifindex,
		vnetHdr: !o.NoVnetHdr,
		stop:    make(chan struct{}),
	}
	e.mtu.Store(mtu)
	e.addr.Store(&addr)
	e.txPool.New = func() any { return newTXScratch(o.TXBatch) }
	if !o.NoCache {
		e.txCache = cache.New(cache.Config[*txScratch]{
			Name:     "afpacket TX scratch",
			New:      func() *txScratch { return newTXScratch(o.TXBatch) },
			Reset:    func(s **txScratch) { (*s).clear() },
			Size:     func(s **txScratch) int { return (*s).size() },
			MaxItems: 1, // the owner's; concurrent writers use txPool
		})
	}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("afpacket:%s/%d", ifname, i))
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			for _, q := range e.queues {
				q.file.Close()
			}
			for _, fd := range fds[i+1:] {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("afpacket: socket %d on %q: %w", i, ifname, err)
		}
		q := &queue{e: e, idx: i, file: f, rc: rc, want: make(chan struct{}, 1)}
		if o.NoCache {
			q.rxr = newRXRing(o.RXBatch, !e.vnetHdr)
		} else {
			aux := !e.vnetHdr
			q.rxCache = cache.New(cache.Config[*rxRing]{
				Name:     "afpacket RX ring",
				New:      func() *rxRing { return newRXRing(o.RXBatch, aux) },
				Reset:    func(r **rxRing) { (*r).reset() },
				Size:     func(r **rxRing) int { return (*r).size() },
				MaxItems: 1,
				MaxBytes: newRXRingSize(o.RXBatch, aux),
			})
		}
		e.queues = append(e.queues, q)
		e.gates = append(e.gates, &e.queues[i].gate)
	}
	for _, q := range e.queues {
		e.wg.Add(1)
		go q.watchLoop()
	}
	return e, nil
}

// close closes the queue's socket, which wakes its goroutines.
func (q *queue) close() { q.file.Close() }

// ring returns the landing ring for a receive round; the caller holds
// q.gate.Owner.
func (q *queue) ring() *rxRing {
	if q.rxCache == nil {
		return q.rxr
	}
	if q.rxIt == nil {
		q.rxIt = q.rxCache.Get()
	}
	return q.rxIt.V
}

// parkRing gives the landing ring back to the cache and parks it, before
// the receive goroutine parks on an empty socket; the caller holds
// q.gate.Owner.
func (q *queue) parkRing() {
	if q.rxCache == nil {
		return
	}
	if q.rxIt != nil {
		q.rxCache.Put(q.rxIt)
		q.rxIt = nil
	}
	q.rxCache.Park()
}

// closeCache releases the landing ring, once no goroutine receives: Close
// calls it after joining the receive goroutine, and takes gate.Owner so
// that a busy poller's round in progress ends first.
func (q *queue) closeCache() {
	if q.rxCache == nil {
		return
	}
	q.gate.Owner.Lock()
	q.rxIt = nil
	q.rxCache.Close()
	q.gate.Owner.Unlock()
}

// closeCaches releases every cache, after Close joined the goroutines.
func (e *Endpoint) closeCaches() {
	for _, q := range e.queues {
		q.closeCache()
	}
	if e.txCache != nil {
		e.txMu.Lock() // a writer's call in progress ends first
		e.txCache.Close()
		e.txMu.Unlock()
	}
}

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
		r        *rxRing
		n        int
		errno    unix.Errno
		deferred bool
	)
	// read returns true holding q.gate.Owner, unless it found the queue
	// deferred to busy pollers.
	read := func(fd uintptr) bool {
		if q.gate.Deferring() {
			deferred = true
			return true
		}
		q.gate.Owner.Lock()
		r = q.ring()
		n, errno = r.recv(int(fd))
		q.rxSyscalls.Add(1)
		if errno == unix.EAGAIN {
			q.parkRing()
			q.gate.Owner.Unlock()
			return false
		}
		q.gate.Received()
		return true
	}
	down := false
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
			if errno == 0 {
				q.deliver(r, n)
			}
			q.gate.Owner.Unlock()
		}
		if err != nil {
			if down && errors.Is(err, os.ErrDeadlineExceeded) {
				if q.checkGone("recvmmsg", unix.ENETDOWN) {
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
			if q.checkGone("recvmmsg", errno) {
				return
			}
			down = true
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
	if q.pollRecv == nil {
		q.pollRecv = func(fd uintptr) { q.pollN, q.pollErrno = q.ring().recv(int(fd)) }
	}
	if q.rc.Control(q.pollRecv) != nil {
		return 0 // closed
	}
	n, errno := q.pollN, q.pollErrno
	q.rxSyscalls.Add(1)
	switch errno {
	case 0:
		q.deliver(q.ring(), n)
		q.gate.CountPolled()
		return n
	case unix.EAGAIN, unix.EINTR:
	default:
		// Down, gone or failing: the receive goroutine knows what to do.
		q.gate.Force()
	}
	return 0
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
		q.e.fail(fmt.Errorf("afpacket: interface %q (index %d) is gone: %w", q.e.ifname, q.e.ifindex, os.NewSyscallError(call, errno)))
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

// deliver hands the n frames of one RX round to the stack: each is copied
// once, into a pooled view of its own size, so the landing buffer can take
// the next round at once.
func (q *queue) deliver(r *rxRing, n int) {
	d := q.e.Dispatcher()
	var delivered, bytes uint64
	for i := range n {
		pt := r.pktType(i)
		switch {
		case pt == unix.PACKET_OUTGOING:
			continue // our own, should PACKET_IGNORE_OUTGOING be missing
		case d == nil:
			q.rxDetached.Add(1)
			continue
		case r.truncated(i):
			q.rxErrors.Add(1)
			continue
		case pt == unix.PACKET_OTHERHOST:
			q.rxMalformed.Add(1)
			continue
		}
		frame, proto, v := parseRX(r.buf(i), q.e.vnetHdr, r.partial(i))
		switch v {
		case rxError:
			q.rxErrors.Add(1)
			continue
		case rxMalformed:
			q.rxMalformed.Add(1)
			continue
		case rxBadChecksum:
			q.rxBadChecksum.Add(1)
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
			Payload: buffer.MakeWithView(buffer.NewViewWithData(frame)),
		})
		pkt.PktType = packetType(pt)
		q.e.ParseHeader(pkt) // cannot fail: parseRX checked the length
		d.DeliverNetworkPacket(proto, pkt)
		pkt.DecRef()
		delivered++
		bytes += uint64(len(frame))
	}
	q.rxPackets.Add(delivered)
	q.rxBytes.Add(bytes)
	q.rxRounds.Add(1)
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

// watchLoop is a queue's writability watcher: after a refused write it
// parks in the netpoller until the socket is writable again (POLLOUT: the
// kernel holds less than half the send buffer of ours), then calls the
// registered callback. A refusal that comes while it waits or calls is
// kept in want, so none is lost.
func (q *queue) watchLoop() {
	defer q.e.wg.Done()
	writable := func(fd uintptr) bool { return pollOut(int(fd)) }
	for {
		select {
		case <-q.want:
		case <-q.e.stop:
			return
		}
		if err := q.rc.Write(writable); err != nil {
			return // closed
		}
		q.e.notifyWritable()
	}
}

// pollOut reports whether fd is writable now, without waiting. An error
// state counts as writable: the next write reports it.
func pollOut(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(pfd, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return true
		}
		return n > 0 && pfd[0].Revents != 0
	}
}

// wantWritable asks the watcher to signal when the socket has room.
func (q *queue) wantWritable() {
	select {
	case q.want <- struct{}{}:
	default:
	}
}

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
// packets, looping over partial sends. It returns how many were sent and,
// if it stopped short, the errno that stopped it (EBADF once closed).
func (q *queue) send(s *txScratch, pkts []*stack.PacketBuffer) (int, unix.Errno) {
	defer s.clear()
	sent := 0
	for sent < len(pkts) {
		chunk := pkts[sent:min(len(pkts), sent+len(s.msgs))]
		s.pending = s.build(chunk, q.e.vnetHdr)
		for len(s.pending) > 0 {
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
			bytes := 0
			for _, pkt := range pkts[sent : sent+s.n] {
				bytes += pkt.Size()
			}
			q.txPackets.Add(uint64(s.n))
			q.txBytes.Add(uint64(bytes))
			s.pending = s.pending[s.n:]
			sent += s.n
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
		q.wantWritable()
		return &tcpip.ErrNoBufferSpace{}
	case unix.EBADF:
		e.txClosed.Add(uint64(rest))
		return &tcpip.ErrClosedForSend{}
	case unix.ENXIO, unix.ENODEV:
		e.fail(fmt.Errorf("afpacket: interface %q (index %d) is gone: %w", e.ifname, e.ifindex, os.NewSyscallError("sendmmsg", errno)))
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
// message headers, iovecs and virtio-net headers for up to TXBatch
// packets. Scratches live in the endpoint's pool, so a call allocates
// nothing once the pool is warm; concurrent calls use different ones.
type txScratch struct {
	msgs    []unix.Mmsghdr
	iovs    []unix.Iovec
	vhdrs   []byte
	starts  []int            // the first iovec of each message
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
	}
	s.sendFn = func(fd uintptr) { s.n, s.errno = sendmmsg(int(fd), s.pending) }
	return s
}

// build fills the message headers for pkts (at most len(s.msgs)) and
// returns them: per packet, a virtio-net header if vnetHdr, then the
// packet's views from its link header on, no payload copied.
func (s *txScratch) build(pkts []*stack.PacketBuffer, vnetHdr bool) []unix.Mmsghdr {
	s.iovs = s.iovs[:0]
	for i, pkt := range pkts {
		start := len(s.iovs)
		s.starts[i] = start
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
	for i := range pkts {
		end := len(s.iovs)
		if i+1 < len(pkts) {
			end = s.starts[i+1]
		}
		m := &s.msgs[i]
		*m = unix.Mmsghdr{}
		if end > s.starts[i] {
			m.Hdr.Iov = &s.iovs[s.starts[i]]
			m.Hdr.SetIovlen(end - s.starts[i])
		}
	}
	return s.msgs[:len(pkts)]
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
