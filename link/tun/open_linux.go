//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

// cloneDevice is the TUN clone device: each open of it is one queue.
const cloneDevice = "/dev/net/tun"

// Offload flags of TUNSETOFFLOAD, from linux/if_tun.h (x/sys/unix does not
// have them).
const (
	tunFCsum = 0x01 // TUN_F_CSUM: userspace takes partial checksums
	tunFTSO4 = 0x02 // TUN_F_TSO4: userspace takes IPv4 TCP super-segments
	tunFTSO6 = 0x04 // TUN_F_TSO6: userspace takes IPv6 TCP super-segments
	tunFUSO4 = 0x20 // TUN_F_USO4: userspace takes IPv4 UDP super-packets (Linux 6.2)
	tunFUSO6 = 0x40 // TUN_F_USO6: the same for IPv6; the kernel wants both or neither
)

// offloadTries are the TUNSETOFFLOAD requests Open tries in turn, until
// the kernel accepts one: everything, then without USO (kernels before
// 6.2 refuse unknown flags with EINVAL), then checksums alone.
var offloadTries = []uint{
	tunFCsum | tunFTSO4 | tunFTSO6 | tunFUSO4 | tunFUSO6,
	tunFCsum | tunFTSO4 | tunFTSO6,
	tunFCsum,
}

// Open creates the TUN device name, or attaches to an existing TUN device
// of that name, with opts (nil means DefaultOptions), configures it and
// returns it as an endpoint. An empty name lets the kernel pick one (Name
// returns it). The device and the netlink configuration belong to the
// network namespace of the calling thread: to open a device in another
// namespace, call Open on a thread inside it (internal/netns's NS.Do).
//
// The endpoint owns the device's file descriptors until Close, which
// deletes the device if Open created it. It needs CAP_NET_ADMIN.
func Open(name string, opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if !o.NoOffload {
		flags |= unix.IFF_VNET_HDR
	}
	if o.Queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	var fds []int
	ok := false
	defer func() {
		if !ok {
			// Closing every queue deletes a device this call created.
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}()
	for range o.Queues {
		fd, actual, err := openQueue(name, flags)
		if err != nil {
			return nil, err
		}
		fds = append(fds, fd)
		// The kernel named the device if name was empty; the other queues
		// must attach to that one.
		name = actual
	}
	off := Offloads{}
	if !o.NoOffload {
		if off, err = negotiate(name, fds[0]); err != nil {
			return nil, err
		}
	}
	if err := configure(name, &o); err != nil {
		return nil, err
	}
	ok = true // newEndpoint owns the descriptors now
	return newEndpoint(name, o, off, fds)
}

// openQueue opens one queue of the device and returns its descriptor and
// the device's name as the kernel has it.
func openQueue(name string, flags uint16) (int, string, error) {
	fd, err := unix.Open(cloneDevice, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		serr := os.NewSyscallError("open "+cloneDevice, err)
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			return -1, "", fmt.Errorf("tun %s: %w: load the tun module (modprobe tun) or create the node (mknod %s c 10 200)", name, serr, cloneDevice)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return -1, "", fmt.Errorf("tun %s: %w: run as root or grant CAP_NET_ADMIN", name, serr)
		}
		return -1, "", fmt.Errorf("tun %s: %w", name, serr)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("tun %s: interface name: %w", name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, "", setIffError(name, flags, err)
	}
	return fd, ifr.Name(), nil
}

// setIffError explains a failed TUNSETIFF.
func setIffError(name string, flags uint16, err error) error {
	serr := os.NewSyscallError("ioctl TUNSETIFF", err)
	multi := flags&unix.IFF_MULTI_QUEUE != 0
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("tun %s: %w: creating or attaching to a TUN device needs CAP_NET_ADMIN: run as root or grant CAP_NET_ADMIN", name, serr)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("tun %s: %w: %s is a single-queue TUN device that is already open: close its other user, or pick another name", name, serr, name)
	case errors.Is(err, unix.E2BIG):
		return fmt.Errorf("tun %s: %w: the device has the most queues the kernel allows (%d)", name, serr, MaxQueues)
	case errors.Is(err, unix.EINVAL):
		l, lerr := netlink.LinkByName(name)
		if lerr != nil {
			break
		}
		tt, isTun := l.(*netlink.Tuntap)
		switch {
		case !isTun:
			return fmt.Errorf("tun %s: %w: the name is taken by a %s device, not a TUN device: pick another name", name, serr, l.Type())
		case tt.Mode == netlink.TUNTAP_MODE_TAP:
			return fmt.Errorf("tun %s: %w: %s is a TAP device, not TUN: delete it or pick another name", name, serr, name)
		case tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 && !multi:
			return fmt.Errorf("tun %s: %w: %s is a multi-queue device: open it with Queues > 1, or delete it", name, serr, name)
		case tt.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 && multi:
			return fmt.Errorf("tun %s: %w: %s is a single-queue device: open it with one queue, or delete it", name, serr, name)
		}
		return fmt.Errorf("tun %s: %w: the existing device does not take these flags (%#x)", name, serr, flags)
	}
	return fmt.Errorf("tun %s: %w", name, serr)
}

// negotiate sets the virtio-net header size and the offloads on the device
// and reports what the kernel took.
func negotiate(name string, fd int) (Offloads, error) {
	// The size is the device's, not the queue's; a persistent device may
	// have been left with another one.
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HeaderSize); err != nil {
		return Offloads{}, fmt.Errorf("tun %s: set the virtio-net header size to %d: %w", name, vnet.HeaderSize, os.NewSyscallError("ioctl TUNSETVNETHDRSZ", err))
	}
	off := Offloads{VNetHeader: true}
	for _, f := range offloadTries {
		err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(f))
		if errors.Is(err, unix.EINVAL) {
			continue
		}
		if err != nil {
			return Offloads{}, fmt.Errorf("tun %s: set offloads %#x: %w", name, f, os.NewSyscallError("ioctl TUNSETOFFLOAD", err))
		}
		off.Checksum = f&tunFCsum != 0
		off.TSO4, off.TSO6 = f&tunFTSO4 != 0, f&tunFTSO6 != 0
		off.USO4, off.USO6 = f&tunFUSO4 != 0, f&tunFUSO6 != 0
		return off, nil
	}
	// No offload at all: the header stays, with nothing in it to act on
	// but the kernel's checksum verdicts.
	return off, nil
}

// configure sets the MTU, adds the addresses and brings the link up,
// through netlink in the calling thread's namespace.
func configure(name string, o *Options) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("tun %s: find the new device through netlink: %w", name, err)
	}
	if l.Attrs().MTU != int(o.MTU) {
		if err := netlink.LinkSetMTU(l, int(o.MTU)); err != nil {
			return fmt.Errorf("tun %s: set MTU %d: %w", name, o.MTU, err)
		}
	}
	for _, p := range o.Addrs {
		a, err := netlink.ParseAddr(p.String())
		if err != nil {
			return fmt.Errorf("tun %s: address %v: %w", name, p, err)
		}
		if p.Addr().Is6() {
			// Usable at once: no duplicate address detection on a link
			// whose only other end is ustack.
			a.Flags |= unix.IFA_F_NODAD
		}
		// Replace, not add: attaching to a persistent device that already
		// has the address is not an error.
		if err := netlink.AddrReplace(l, a); err != nil {
			return fmt.Errorf("tun %s: add address %v: %w", name, p, err)
		}
	}
	if !o.NoUp {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("tun %s: set the link up: %w", name, err)
		}
	}
	return nil
}

// queue is one of the device's queues: its receive goroutine, its
// writability watcher and its share of the counters. Its file is the
// queue's descriptor, registered with the runtime poller; every system
// call on it goes through rc, whose reference on the descriptor makes
// Close wait for a call in progress, so the descriptor is never closed, or
// reused, under one.
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
	// buffers (for reads, and for splitting USO): with the cache on,
	// rxIt and usoIt, taken from rxCache (whose owner is the holder of
	// gate.Owner) for a run of rounds and put back, parked, when the
	// receive goroutine finds the queue empty, so that an idle queue holds
	// none after cache.DefaultIdleAfter; with it off, rxb and uso, kept
	// for good.
	gate    linkutil.PollGate
	rxCache *cache.Cache[[]byte]
	rxIt    *cache.Item[[]byte]
	usoIt   *cache.Item[[]byte]
	rxb     []byte // landing buffer of rxBufSize, without the cache; made on first use
	uso     []byte // datagram buffer for splitting USO, without the cache; made on first use
	// pollRound is busyPoll's round, bound once so that a round
	// allocates nothing; it leaves its result in pollN and pollErr.
	pollRound func(fd uintptr)
	pollN     int
	pollErr   error
	// rxErr is the read failure that stopped the receive goroutine, which
	// alone touches it.
	rxErr error
	counters
}

// newEndpoint builds an endpoint over open, non-blocking descriptors of
// the device name, one per queue, once Open has configured it. It owns fds
// from the call on, closing them on error. It starts no goroutine: Attach
// starts the receive goroutines, a queue's first refused write its
// watcher. Tests call it with socketpairs.
func newEndpoint(name string, o Options, off Offloads, fds []int) (*Endpoint, error) {
	e := &Endpoint{name: name, opts: o, offloads: off, stop: make(chan struct{})}
	switch {
	case off.TSO():
		e.gsoKind = stack.HostGSOSupported
	case o.SoftwareGSO:
		e.gsoKind = stack.GVisorGSOSupported
	default:
		e.gsoKind = stack.GSONotSupported
	}
	e.mtu.Store(o.MTU)
	e.txPool.New = func() any { return newTXScratch() }
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("%s:%s#%d", cloneDevice, name, i))
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			for _, q := range e.queues {
				q.file.Close()
			}
			for _, fd := range fds[i+1:] {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("tun %s: queue %d: register with the runtime poller: %w", name, i, err)
		}
		q := &queue{e: e, idx: i, file: f, rc: rc}
		q.startWatch = func() {
			e.wg.Add(1)
			go q.watchLoop()
		}
		if !o.NoCache {
			q.rxCache = cache.New(cache.Config[[]byte]{
				Name:  "tun landing buffers",
				New:   func() []byte { return make([]byte, rxBufSize) },
				Reset: func(b *[]byte) { *b = (*b)[:cap(*b)] },
				Size:  func(b *[]byte) int { return cap(*b) },
				// The read buffer and the USO buffer.
				MaxItems: 2,
				MaxBytes: 2 * rxBufSize,
			})
		}
		e.queues = append(e.queues, q)
		e.gates = append(e.gates, &e.queues[i].gate)
	}
	return e, nil
}

// close closes the queue's descriptor, which wakes its goroutines once the
// system calls in progress on it have returned. Closing the last
// descriptor of a device Open created deletes the device.
func (q *queue) close() { q.file.Close() }

// closeCaches releases every cache, after Close joined the goroutines.
func (e *Endpoint) closeCaches() {
	for _, q := range e.queues {
		q.closeLanding()
	}
}
