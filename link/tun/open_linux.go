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
// deletes the device if Open created it. It needs CAP_NET_ADMIN; OpenFD
// adopts a device that something else created.
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
	if err := configure(name, &o); err != nil {
		return nil, err
	}
	d := device{name: name, flags: flags}
	e, err := setup(kernelIoctls, d, o, fds)
	ok = err == nil // the endpoint owns the descriptors now
	return e, err
}

// OpenFD adopts fd, an open descriptor of a TUN device that something else
// created, and returns it as an endpoint of one queue: the descriptor
// Android's VpnService.establish returns, or one a privileged helper
// opened and passed over a unix socket (SCM_RIGHTS). It asks the device
// (TUNGETIFF) for its name and flags, and uses the virtio-net header, and
// with it the offloads, exactly when the descriptor has it (IFF_VNET_HDR).
// opts is as for Open (nil means DefaultOptions), but OpenFD uses no
// netlink, which an Android app may not: it neither reads nor configures
// the device, so it refuses Addrs and Queues > 1, ignores NoUp, and takes
// MTU on trust (give the device's).
//
// It makes fd non-blocking, which changes the open file, shared with every
// copy of the descriptor (the helper's, for one), and close-on-exec. Where
// the kernel refuses TUNSETOFFLOAD on the adopted descriptor, the device
// keeps its creator's offloads and Offloads reports Inherited.
//
// On success the endpoint owns fd, as an *os.File made by os.NewFile would,
// and closes it in Close: the caller must not use or close it again.
// Closing it deletes the device if it was the device's last descriptor and
// the device is not persistent (on Android, that ends the VPN). On error
// OpenFD has not closed fd or changed its flags: it is still the caller's.
// An fd that is not a TUN device (or is a TAP one) is refused with an
// error that says so, and left open. OpenFD needs no privilege beyond
// holding fd.
//
// A queue of a multi-queue device (IFF_MULTI_QUEUE, reported by
// MultiQueue) is adopted alone: the kernel steers each flow to one of the
// device's attached queues, so its creator must leave no other queue
// attached, or the flows steered there never reach ustack.
func OpenFD(fd int, opts *Options) (*Endpoint, error) {
	return openFD(kernelIoctls, fd, opts)
}

// openFD is OpenFD with the TUN ioctls given, so that tests can stand a
// socketpair in for the device.
func openFD(io ioctls, fd int, opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, fmt.Errorf("tun fd %d: %w", fd, err)
	}
	if err := checkAdopted(fd, &o); err != nil {
		return nil, err
	}
	d, err := io.getIff(fd)
	if err != nil {
		return nil, getIffError(fd, err)
	}
	d.adopted = true
	switch {
	case d.flags&unix.IFF_TAP != 0:
		return nil, fmt.Errorf("tun fd %d: %s is a TAP device, which carries Ethernet frames: OpenFD takes a TUN device (IFF_TUN), which carries IP packets", fd, d.name)
	case d.flags&unix.IFF_TUN == 0:
		return nil, fmt.Errorf("tun fd %d: %s is not a TUN device (flags %#x): expected a descriptor of /dev/net/tun attached with IFF_TUN", fd, d.name, d.flags)
	case d.flags&unix.IFF_NO_PI == 0:
		return nil, fmt.Errorf("tun fd %d: %s puts a packet-information header before every packet (it was attached without IFF_NO_PI): have its creator set IFF_NO_PI, as VpnService does", fd, d.name)
	}
	return setup(io, d, o, []int{fd})
}

// device is what Open and OpenFD know of a TUN device once they hold its
// descriptors.
type device struct {
	name  string // the interface name, as the kernel has it
	flags uint16 // the TUNSETIFF flags: IFF_TUN, IFF_VNET_HDR, ...
	// adopted: OpenFD's, created by someone else, where an LSM may refuse
	// the ioctls that set offloads.
	adopted bool
}

// ioctls are the TUN ioctls that Open and OpenFD issue on a descriptor
// they hold, so that tests can stand a socketpair in for the device.
type ioctls struct {
	getIff         func(fd int) (device, error) // TUNGETIFF: name and flags
	vnetHdrSize    func(fd int) (int, error)    // TUNGETVNETHDRSZ
	setVnetHdrSize func(fd, size int) error     // TUNSETVNETHDRSZ
	setOffload     func(fd int, flags uint) error
}

// kernelIoctls are the kernel's.
var kernelIoctls = ioctls{
	getIff: func(fd int) (device, error) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return device{}, err
		}
		if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
			return device{}, err
		}
		return device{name: ifr.Name(), flags: ifr.Uint16()}, nil
	},
	vnetHdrSize:    func(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TUNGETVNETHDRSZ) },
	setVnetHdrSize: func(fd, size int) error { return unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, size) },
	setOffload:     func(fd int, flags uint) error { return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(flags)) },
}

// getIffError explains a failed TUNGETIFF on a descriptor OpenFD was given.
func getIffError(fd int, err error) error {
	serr := os.NewSyscallError("ioctl TUNGETIFF", err)
	switch {
	case errors.Is(err, unix.EBADF):
		return fmt.Errorf("tun fd %d: %w: not an open file descriptor: pass the descriptor of an open TUN device", fd, serr)
	case errors.Is(err, unix.EBADFD):
		return fmt.Errorf("tun fd %d: %w: the descriptor is of /dev/net/tun but attached to no device (never set up with TUNSETIFF, detached with TUNSETQUEUE, or its device deleted): expected one attached to a TUN device", fd, serr)
	case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("tun fd %d: %w: not a TUN device: expected a descriptor of /dev/net/tun attached to a TUN device with TUNSETIFF, as VpnService.establish returns", fd, serr)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("tun fd %d: %w: the system's security policy forbids asking the device what it is: allow TUNGETIFF on the descriptor", fd, serr)
	}
	return fmt.Errorf("tun fd %d: %w", fd, serr)
}

// setup is what Open and OpenFD share once they hold the device's
// descriptors, one per queue: it negotiates the virtio-net header and the
// offloads, if the device has the header; makes the descriptors
// non-blocking (Open's are already, an adopted one may not be: the runtime
// poller takes only non-blocking ones) and close-on-exec; and builds the
// endpoint over them. On error the descriptors are still the caller's,
// with their flags as they were.
func setup(io ioctls, d device, o Options, fds []int) (*Endpoint, error) {
	off := Offloads{}
	if d.flags&unix.IFF_VNET_HDR != 0 {
		var err error
		if off, err = negotiate(io, d, fds[0], o.NoOffload); err != nil {
			return nil, err
		}
	}
	for i, fd := range fds {
		if fd < 0 {
			return nil, fmt.Errorf("tun %s: queue %d: descriptor %d is not a file descriptor", d.name, i, fd)
		}
	}
	for i, fd := range fds {
		// fcntl on a descriptor the kernel has just answered ioctls on
		// does not fail; were it to, no descriptor has changed hands.
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("tun %s: queue %d: make descriptor %d non-blocking: %w", d.name, i, fd, os.NewSyscallError("fcntl", err))
		}
		unix.CloseOnExec(fd)
	}
	e := newEndpoint(d, o, off, fds)
	e.setOffload = io.setOffload
	return e, nil
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

// negotiate sets the virtio-net header size and the offloads (none with
// noOffload) on a device with the header, and reports what the kernel took.
func negotiate(io ioctls, d device, fd int, noOffload bool) (Offloads, error) {
	// The size is the device's, not the queue's; a persistent device may
	// have been left with another one, and an adopted one set up for
	// another header (virtio 1.0's is 12 bytes). Set only if it differs:
	// a policy that allows only some ioctls may refuse setting it.
	if size, err := io.vnetHdrSize(fd); err != nil || size != vnet.HeaderSize {
		if err := io.setVnetHdrSize(fd, vnet.HeaderSize); err != nil {
			return Offloads{}, fmt.Errorf("tun %s: set the virtio-net header size to %d (it is %d): %w: open the device without IFF_VNET_HDR, or with a %d-byte header", d.name, vnet.HeaderSize, size, os.NewSyscallError("ioctl TUNSETVNETHDRSZ", err), vnet.HeaderSize)
		}
	}
	off := Offloads{VNetHeader: true}
	tries := offloadTries
	if noOffload {
		tries = []uint{0}
	}
	for _, f := range tries {
		err := io.setOffload(fd, f)
		if errors.Is(err, unix.EINVAL) {
			continue
		}
		if d.adopted && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
			// Not ours to change: what the creator set stays, and the
			// receive path takes whatever the headers announce.
			off.Inherited = true
			return off, nil
		}
		if err != nil {
			return Offloads{}, fmt.Errorf("tun %s: set offloads %#x: %w", d.name, f, os.NewSyscallError("ioctl TUNSETOFFLOAD", err))
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

// flags is o as TUNSETOFFLOAD flags.
func (o Offloads) flags() uint {
	var f uint
	for _, b := range []struct {
		on   bool
		flag uint
	}{{o.Checksum, tunFCsum}, {o.TSO4, tunFTSO4}, {o.TSO6, tunFTSO6}, {o.USO4, tunFUSO4}, {o.USO6, tunFUSO6}} {
		if b.on {
			f |= b.flag
		}
	}
	return f
}

// setKernelOffloads asks the kernel for the negotiated offloads (on) or
// none, for SetCoalescing. The offloads are the device's, so one queue's
// descriptor serves; rc keeps it from being closed under the call. If the
// kernel refuses (the device was deleted, or a policy allows the ioctl no
// longer), the offloads stay as they were: a forwarding stack then drops
// the super-segments it cannot route, and counts them.
func (e *Endpoint) setKernelOffloads(on bool) {
	f := e.offloads.flags()
	if e.setOffload == nil || f == 0 || len(e.queues) == 0 {
		return
	}
	if !on {
		f = 0
	}
	e.queues[0].rc.Control(func(fd uintptr) { _ = e.setOffload(int(fd), f) })
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
	// ring writes batches in one system call (nil: writev each packet).
	ring       *txRing
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
	rxb     []byte // landing buffer of landingSize, without the cache; made on first use
	uso     []byte // datagram buffer for splitting USO, without the cache; made on first use
	// landingSize is the size of the landing buffer: rxBufSize, or with
	// rxRing the slab of its slots, if larger.
	landingSize int
	// rxRing reads a batch of packets in one system call, into rxSlots
	// slots of rxSlot bytes at the start of the landing buffer (nil:
	// read(2) each packet). rxTrip is how many reads a round's first trip
	// asks for: what the last round read, so that a queue that receives
	// one packet at a time reads it with read(2), as without the ring.
	// All belong to the holder of gate.Owner.
	rxRing          *rxRing
	rxSlot, rxSlots int
	rxTrip          int
	// pollRound is busyPoll's round, bound once so that a round
	// allocates nothing; it leaves its result in pollN and pollErr.
	pollRound func(fd uintptr)
	pollN     int
	pollErr   error
	// rxErr is the read failure that stopped the receive goroutine, which
	// alone touches it.
	rxErr error
	// gro coalesces the TCP segments of one receive round, and rxd is
	// the round's dispatcher (nil: detached); both belong to the holder
	// of gate.Owner.
	gro linkutil.GRO
	rxd stack.NetworkDispatcher
	counters
}

// newEndpoint builds an endpoint over open, non-blocking, non-negative
// descriptors of the device d, one per queue, and owns them from then on.
// It starts no goroutine: Attach starts the receive goroutines, a queue's
// first refused write its watcher. Tests call it with socketpairs.
func newEndpoint(d device, o Options, off Offloads, fds []int) *Endpoint {
	name := d.name
	e := &Endpoint{name: name, multiQueue: d.flags&unix.IFF_MULTI_QUEUE != 0, opts: o, offloads: off, stop: make(chan struct{})}
	switch {
	case off.TSO():
		e.gsoKind = stack.HostGSOSupported
	case o.NoSoftwareGSO:
		e.gsoKind = stack.GSONotSupported
	default:
		e.gsoKind = stack.GVisorGSOSupported
	}
	e.mtu.Store(o.MTU)
	e.txPool.New = func() any { return newTXScratch() }
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("%s:%s#%d", cloneDevice, name, i))
		rc, err := f.SyscallConn()
		if err != nil {
			// SyscallConn fails only for a nil *os.File, and os.NewFile
			// returns nil only for a negative descriptor, which the
			// callers exclude: a failure is a broken invariant.
			panic(fmt.Sprintf("tun %s: queue %d: SyscallConn of descriptor %d: %v", name, i, fd, err))
		}
		q := &queue{e: e, idx: i, file: f, rc: rc}
		if !off.VNetHeader && !o.NoTXRing {
			q.ring = newTXRing() // nil where the kernel has none: writev
		}
		q.landingSize, q.rxSlots, q.rxTrip = rxBufSize, 1, 1
		if !off.VNetHeader && !o.NoRXRing {
			q.setupRXRing(o.MTU)
		}
		q.gro.Init(!o.NoGRO)
		q.gro.SetRounds(&e.rounds)
		q.startWatch = func() {
			e.wg.Add(1)
			go q.watchLoop()
		}
		if !o.NoCache {
			q.rxCache = cache.New(cache.Config[[]byte]{
				Name:  "tun landing buffers",
				New:   func() []byte { return make([]byte, q.landingSize) },
				Reset: func(b *[]byte) { *b = (*b)[:cap(*b)] },
				Size:  func(b *[]byte) int { return cap(*b) },
				// The read buffer and the USO buffer (never both
				// with the ring, which is only used without the
				// virtio-net header, and so without USO).
				MaxItems: 2,
				MaxBytes: 2 * q.landingSize,
			})
		}
		e.queues = append(e.queues, q)
		e.gates = append(e.gates, &e.queues[i].gate)
	}
	return e
}

// close closes the queue's descriptor, which wakes its goroutines once the
// system calls in progress on it have returned. Closing the last
// descriptor of a device Open created deletes the device.
func (q *queue) close() {
	q.file.Close()
	q.ring.close()
}

// closeCaches releases every cache, after Close joined the goroutines.
func (e *Endpoint) closeCaches() {
	for _, q := range e.queues {
		q.closeLanding()
	}
}
