//go:build linux

package afpacket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
)

// queue is one AF_PACKET socket: its receive goroutine, its writability
// watcher and its share of the counters. Its file is the socket,
// registered with the runtime poller; every system call on it goes through
// rc, whose reference on the descriptor makes Close wait for a call in
// progress, so the descriptor is never closed, or reused, under one.
type queue struct {
	e    *Endpoint
	idx  int
	file *os.File
	rc   syscall.RawConn
	// watch signals writability after a refused write; startWatch starts
	// its goroutine (bound once, so a refusal allocates nothing).
	watch      linkutil.Watcher
	startWatch func()
	// gate serialises receive rounds between the receive goroutine and
	// busy-polling readers; whoever holds gate.Owner uses the landing
	// batch: rxb with the cache off; with it on, rxIt, taken from rxCache
	// (whose owner is the holder of gate.Owner) for a run of rounds and
	// put back, parked, when the receive goroutine finds the socket empty,
	// so that an idle queue's batch is released after cache.DefaultIdleAfter.
	gate    linkutil.PollGate
	rxb     *rxBatch
	rxCache *cache.Cache[*rxBatch]
	rxIt    *cache.Item[*rxBatch]
	// pollRecv is busyPoll's receive, bound once so that a round
	// allocates nothing; it leaves its result in pollN and pollErrno.
	pollRecv  func(fd uintptr)
	pollN     int
	pollErrno unix.Errno
	// gro coalesces the TCP segments of one receive round; rxd is the
	// round's dispatcher (nil: detached) and roundPkts and roundBytes its
	// counts so far. All belong to the holder of gate.Owner.
	gro                   linkutil.GRO
	rxd                   stack.NetworkDispatcher
	roundPkts, roundBytes uint64
	// ring is the TPACKET_V3 receive ring with RXRing (nil: recvmmsg),
	// and ringFrame q.receive, bound once so that a block allocates
	// nothing. Both belong to the holder of gate.Owner.
	ring      *ring
	ringFrame ringFrame
	// slots is the TPACKET_V2 receive ring with RXSlotRing (nil:
	// recvmmsg or the block ring), whose frames too large for a slot
	// land in the landing batch; pollSlots is busyPoll's round on it
	// (bound once), and slotErrno an error a busy poller's round was
	// told and the receive goroutine has yet to act on. All belong to
	// the holder of gate.Owner.
	slots     *slotRing
	pollSlots func(fd uintptr)
	slotErrno unix.Errno
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
	var rings []rxRing
	fail := func(err error) (*Endpoint, error) {
		for _, r := range rings {
			r.unmap()
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	fanoutID := 0
	for i := range o.Queues {
		fd, r, err := openSocket(ifname, ifi.Index, ifi.MTU, &o)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, fd)
		if r != (rxRing{}) {
			rings = append(rings, r)
		}
		if o.Queues > 1 {
			if fanoutID, err = joinFanout(fd, i, fanoutID); err != nil {
				return fail(fmt.Errorf("afpacket: join %d sockets on %q in a fanout group: %w", o.Queues, ifname, err))
			}
		}
	}
	e, err := newEndpoint(ifname, ifi.Index, uint32(ifi.MTU), tcpip.LinkAddress(ifi.HardwareAddr), o, fds, rings)
	if err != nil {
		return nil, err // newEndpoint closed the descriptors and unmapped the rings
	}
	return e, nil
}

// openSocket opens one packet socket, sets its options, maps its receive
// ring with RXRing or RXSlotRing (slots sized for mtu), and binds it to
// the interface. It opens the socket for
// no protocol and binds it for all (ETH_P_ALL) together with the
// interface: a socket opened for ETH_P_ALL would start queueing every
// interface's frames before the bind (and a ring, before the bind too).
func openSocket(ifname string, ifindex, mtu int, o *Options) (int, rxRing, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, rxRing{}, sockErr(ifname, "open a packet socket", "socket", err)
	}
	set := func(level, opt, v int, name string) error {
		if err := unix.SetsockoptInt(fd, level, opt, v); err != nil {
			return sockErr(ifname, "set "+name, "setsockopt", err)
		}
		return nil
	}
	var errs []error
	if o.NoOffload {
		// Without the virtio-net header the kernel's checksum status comes
		// only this way; it says which frames carry a partial checksum.
		errs = append(errs, set(unix.SOL_PACKET, unix.PACKET_AUXDATA, 1, "PACKET_AUXDATA"))
	} else {
		errs = append(errs, set(unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR (or set Options.NoOffload)"))
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
		return -1, rxRing{}, err
	}
	// After PACKET_VNET_HDR, which the kernel refuses once a ring exists.
	var r rxRing
	switch o.RX {
	case RXRing:
		r.blocks, err = setupRing(fd, blocksFor(o.RcvBuf), ifname)
	case RXSlotRing:
		r.slots, err = setupSlotRing(fd, mtu, o.RcvBuf, ifname)
	}
	if err != nil {
		unix.Close(fd)
		return -1, rxRing{}, err
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		r.unmap()
		unix.Close(fd)
		if errors.Is(err, unix.ENODEV) {
			return -1, rxRing{}, fmt.Errorf("afpacket: interface %q not found: check `ip link`: %w", ifname, os.NewSyscallError("bind", err))
		}
		return -1, rxRing{}, sockErr(ifname, "bind a packet socket", "bind", err)
	}
	return fd, r, nil
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
// queue, and with RXRing or RXSlotRing their receive rings, in the same order. It owns
// fds and rings from the call on, closing and unmapping them on error. It
// starts no goroutine: Attach starts the receive goroutines, a queue's
// first refused write its watcher. Tests call it with socketpairs (and no
// rings).
func newEndpoint(ifname string, ifindex int, mtu uint32, addr tcpip.LinkAddress, o Options, fds []int, rings []rxRing) (*Endpoint, error) {
	e := &Endpoint{
		opts:    o,
		ifname:  ifname,
		ifindex: ifindex,
		vnetHdr: !o.NoOffload,
		stop:    make(chan struct{}),
	}
	switch {
	case e.vnetHdr:
		e.rxCheck = checkVnet
	case o.NoGRO:
		e.rxCheck = checkStack
	default:
		e.rxCheck = checkHere
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
			for _, r := range rings {
				r.unmap()
			}
			return nil, fmt.Errorf("afpacket: socket %d on %q: %w", i, ifname, err)
		}
		q := &queue{e: e, idx: i, file: f, rc: rc}
		q.gro.Init(!o.NoGRO)
		q.gro.SetRounds(&e.rounds)
		// Every queue transmits, whatever it receives with: a refused
		// write starts the watcher.
		q.startWatch = func() {
			e.wg.Add(1)
			go q.watchLoop()
		}
		if i < len(rings) && rings[i].blocks != nil {
			q.ring = rings[i].blocks
			q.ringFrame = q.receive
			e.queues = append(e.queues, q)
			e.gates = append(e.gates, &e.queues[i].gate)
			continue // the ring is the landing area
		}
		if i < len(rings) {
			q.slots = rings[i].slots // frames too large for it land below
		}
		if o.NoCache {
			q.rxb = newRXBatch(o.RXBatch, !e.vnetHdr)
		} else {
			aux := !e.vnetHdr
			q.rxCache = cache.New(cache.Config[*rxBatch]{
				Name:     "afpacket RX landing batch",
				New:      func() *rxBatch { return newRXBatch(o.RXBatch, aux) },
				Reset:    func(r **rxBatch) { (*r).reset() },
				Size:     func(r **rxBatch) int { return (*r).size() },
				MaxItems: 1,
				MaxBytes: rxBatchSize(o.RXBatch, aux),
			})
		}
		e.queues = append(e.queues, q)
		e.gates = append(e.gates, &e.queues[i].gate)
	}
	return e, nil
}

// close closes the queue's socket, which wakes its goroutines.
func (q *queue) close() { q.file.Close() }

// closeCaches releases every cache, after Close joined the goroutines.
func (e *Endpoint) closeCaches() {
	for _, q := range e.queues {
		q.closeLanding()
	}
	if e.txCache != nil {
		e.txMu.Lock() // a writer's call in progress ends first
		e.txCache.Close()
		e.txMu.Unlock()
	}
}
