//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/vnet"
)

// cloneDevice is the TUN clone device: each open of it is one queue.
const cloneDevice = "/dev/net/tun"

// tunTypeMask selects the device type in TUNSETIFF flags: IFF_TUN or
// IFF_TAP (TUN_TYPE_MASK in drivers/net/tun.c).
const tunTypeMask = unix.IFF_TUN | unix.IFF_TAP

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

// Create creates the TUN device name (a TAP device with opts.TAP), or
// attaches to an existing device of that name and type (a persistent one,
// such as `ip tuntap add` makes, or a multi-queue one with queues to
// spare), opens one descriptor per queue, and configures the device as
// opts asks (nil means DefaultOptions): the MTU, the kernel side's
// addresses, the link up. With opts.NoConfigure it configures nothing:
// the device's addresses, MTU and link state stay as its creator left
// them. An empty name lets the kernel pick one (Device.Name returns it).
// The device and the netlink configuration belong to the network
// namespace of the calling thread: to create a device in another
// namespace, call Create on a thread inside it (internal/netns's NS.Do).
//
// The descriptors are the caller's: a helper process inside a user and
// network namespace creates the device there and passes a descriptor over
// a unix socket (SCM_RIGHTS) to a process outside, which adopts it with
// OpenFD; Open builds its endpoint over them in place. Create needs
// CAP_NET_ADMIN over the network namespace, or to be the owner of an
// existing device. A name taken by a device of the other type (a TAP
// device when opts asks for TUN, or the reverse), or by something that is
// not a TUN or TAP device at all, is refused with an error that says so.
func Create(name string, opts *Options) (*Device, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return create(name, &o)
}

// create is Create with normalized options; with NoConfigure and a zero
// MTU it sets o.MTU to the device's.
func create(name string, o *Options) (*Device, error) {
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if o.TAP {
		flags = unix.IFF_TAP | unix.IFF_NO_PI
	}
	if !o.NoOffload {
		flags |= unix.IFF_VNET_HDR
	}
	if o.Queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	d := &Device{TAP: o.TAP, flags: flags}
	ok := false
	defer func() {
		if !ok {
			// Closing every queue deletes a device this call created.
			d.Close()
		}
	}()
	for range o.Queues {
		fd, actual, err := openQueue(name, flags)
		if err != nil {
			return nil, err
		}
		d.FDs = append(d.FDs, fd)
		// The kernel named the device if name was empty; the other queues
		// must attach to that one.
		name = actual
	}
	d.Name = name
	switch {
	case !o.NoConfigure:
		if err := configure(name, o); err != nil {
			return nil, err
		}
	case o.MTU == 0:
		mtu, err := deviceMTU(name)
		if err != nil {
			return nil, err
		}
		o.MTU = mtu
	}
	d.MTU = o.MTU
	ok = true
	return d, nil
}

// Close closes the device's descriptors, which deletes the device if
// Create created it, it is not persistent and no other process holds a
// descriptor of it (one passed over a unix socket is such a descriptor).
// Close it only while the descriptors are still the caller's: not after
// one was handed to OpenFD. It is idempotent.
func (d *Device) Close() {
	for _, fd := range d.FDs {
		unix.Close(fd)
	}
	d.FDs = nil
}

// deviceMTU reads the MTU of the interface name in the calling thread's
// namespace, for NoConfigure, and checks that an endpoint can take it.
func deviceMTU(name string) (uint32, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("tun %s: read the device's MTU through netlink: %w: give Options.MTU", name, err)
	}
	mtu := l.Attrs().MTU
	if mtu < MinMTU || mtu > MaxMTU {
		return 0, fmt.Errorf("tun %s: the device's MTU is %d: an endpoint takes %d to %d; have its creator set one in that range", name, mtu, MinMTU, MaxMTU)
	}
	return uint32(mtu), nil
}

// Open creates the TUN device name (a TAP device with opts.TAP), or
// attaches to an existing device of that name and type, configures it
// (unless opts.NoConfigure) and returns it as an endpoint: Create, then
// the endpoint over its descriptors. opts nil means DefaultOptions. An
// empty name lets the kernel pick one (Name returns it). The device and
// the netlink configuration belong to the network namespace of the
// calling thread: to open a device in another namespace, call Open on a
// thread inside it (internal/netns's NS.Do).
//
// The endpoint owns the device's file descriptors until Close, which
// deletes the device if Open created it and it is not persistent. It
// needs CAP_NET_ADMIN (see Create); OpenFD adopts a device that something
// else created. A TAP endpoint goes into a stack as Ethernet returns it.
func Open(name string, opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	d, err := create(name, &o)
	if err != nil {
		return nil, err
	}
	e, err := setup(kernelIoctls, devInfo{name: d.Name, flags: d.flags}, o, d.FDs)
	if err != nil {
		d.Close()
		return nil, err
	}
	return e, nil // the endpoint owns the descriptors now
}

// OpenFD adopts fd, an open descriptor of a TUN device that something else
// created (of a TAP device with opts.TAP), and returns it as an endpoint
// of one queue: the descriptor Android's VpnService.establish returns, or
// one a privileged helper opened (Create) and passed over a unix socket
// (SCM_RIGHTS). It asks the device (TUNGETIFF) for its name and flags,
// refuses a device of the other type than opts asks for, and uses the
// virtio-net header, and with it the offloads, exactly when the
// descriptor has it (IFF_VNET_HDR). opts is as for Open (nil means
// DefaultOptions), but OpenFD uses no netlink, which an Android app may
// not: it neither reads nor configures the device, so it refuses Addrs and
// Queues > 1, ignores NoUp, and takes MTU on trust (give the device's).
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
// An fd that is not a TUN or TAP device, or is of the other type, is
// refused with an error that says so, and left open. OpenFD needs no
// privilege beyond holding fd.
//
// A queue of a multi-queue device (IFF_MULTI_QUEUE, reported by
// MultiQueue) is adopted alone: the kernel steers each flow to one of the
// device's attached queues, so its creator must leave no other queue
// attached, or the flows steered there never reach ustack.
func OpenFD(fd int, opts *Options) (*Endpoint, error) {
	return openFD(kernelIoctls, fd, opts)
}

// OpenFDs adopts the descriptors of one device's queues, as Create
// returns them (Device.FDs), in this process or, passed on, in another:
// OpenFD of every queue at once, with Options.Queues their number (0
// means len(fds)). Every descriptor must be a queue of the same device,
// and several must be of a multi-queue one. On success the endpoint owns
// every descriptor; on error the caller still does.
func OpenFDs(fds []int, opts *Options) (*Endpoint, error) {
	return openFDs(kernelIoctls, fds, opts)
}

// openFD is OpenFD with the TUN ioctls given, so that tests can stand a
// socketpair in for the device.
func openFD(io ioctls, fd int, opts *Options) (*Endpoint, error) {
	return openFDs(io, []int{fd}, opts)
}

// openFDs is OpenFDs with the TUN ioctls given.
func openFDs(io ioctls, fds []int, opts *Options) (*Endpoint, error) {
	if len(fds) == 0 {
		return nil, errors.New("tun: no descriptor to adopt: pass the device's descriptors, one per queue")
	}
	fd := fds[0]
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(fds) > 1 {
		if o.Queues != 0 && o.Queues != len(fds) {
			return nil, fmt.Errorf("tun fd %d: %d descriptors given for %d queues: give one descriptor per queue", fd, len(fds), o.Queues)
		}
		o.Queues = 1 // checked as one queue each, below
	}
	o, err := o.normalize()
	if err != nil {
		return nil, fmt.Errorf("tun fd %d: %w", fd, err)
	}
	for _, fd := range fds {
		if err := checkAdopted(fd, &o); err != nil {
			return nil, err
		}
	}
	o.Queues = len(fds)
	if o.MTU == 0 {
		o.MTU = DefaultMTU // NoConfigure's "the device's": OpenFD cannot read it
	}
	d, err := io.getIff(fd)
	if err != nil {
		return nil, getIffError(fd, err)
	}
	for _, q := range fds[1:] {
		dq, err := io.getIff(q)
		if err != nil {
			return nil, getIffError(q, err)
		}
		if dq.name != d.name || dq.flags != d.flags {
			return nil, fmt.Errorf("tun fd %d: a queue of %s (flags %#x), but fd %d is of %s (flags %#x): give the queues of one device", q, dq.name, dq.flags, fd, d.name, d.flags)
		}
	}
	if len(fds) > 1 && d.flags&unix.IFF_MULTI_QUEUE == 0 {
		return nil, fmt.Errorf("tun fd %d: %d descriptors of %s, which is not multi-queue (IFF_MULTI_QUEUE): give one descriptor", fd, len(fds), d.name)
	}
	d.adopted = true
	switch typ := d.flags & tunTypeMask; {
	case typ == unix.IFF_TAP && !o.TAP:
		return nil, fmt.Errorf("tun fd %d: %s is a TAP device, which carries Ethernet frames: adopt it with Options.TAP, or pass the descriptor of a TUN device (IFF_TUN), which carries IP packets", fd, d.name)
	case typ == unix.IFF_TUN && o.TAP:
		return nil, fmt.Errorf("tun fd %d: %s is a TUN device, which carries IP packets: adopt it without Options.TAP, or pass the descriptor of a TAP device (IFF_TAP), which carries Ethernet frames", fd, d.name)
	case typ != unix.IFF_TUN && typ != unix.IFF_TAP:
		return nil, fmt.Errorf("tun fd %d: %s is neither a TUN nor a TAP device (flags %#x): expected a descriptor of /dev/net/tun attached with IFF_TUN or IFF_TAP", fd, d.name, d.flags)
	case d.flags&unix.IFF_NO_PI == 0:
		return nil, fmt.Errorf("tun fd %d: %s puts a packet-information header before every packet (it was attached without IFF_NO_PI): have its creator set IFF_NO_PI, as VpnService does", fd, d.name)
	}
	return setup(io, d, o, fds)
}

// devInfo is what Open and OpenFD know of a TUN or TAP device once they
// hold its descriptors.
type devInfo struct {
	name  string // the interface name, as the kernel has it
	flags uint16 // the TUNSETIFF flags: IFF_TUN or IFF_TAP, IFF_VNET_HDR, ...
	// adopted: OpenFD's, created by someone else, where an LSM may refuse
	// the ioctls that set offloads.
	adopted bool
}

// ioctls are the TUN ioctls that Open and OpenFD issue on a descriptor
// they hold, so that tests can stand a socketpair in for the device.
type ioctls struct {
	getIff         func(fd int) (devInfo, error) // TUNGETIFF: name and flags
	vnetHdrSize    func(fd int) (int, error)     // TUNGETVNETHDRSZ
	setVnetHdrSize func(fd, size int) error      // TUNSETVNETHDRSZ
	setOffload     func(fd int, flags uint) error
}

// kernelIoctls are the kernel's.
var kernelIoctls = ioctls{
	getIff: func(fd int) (devInfo, error) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return devInfo{}, err
		}
		if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
			return devInfo{}, err
		}
		return devInfo{name: ifr.Name(), flags: ifr.Uint16()}, nil
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
		return fmt.Errorf("tun fd %d: %w: not an open file descriptor: pass the descriptor of an open TUN or TAP device", fd, serr)
	case errors.Is(err, unix.EBADFD):
		return fmt.Errorf("tun fd %d: %w: the descriptor is of /dev/net/tun but attached to no device (never set up with TUNSETIFF, detached with TUNSETQUEUE, or its device deleted): expected one attached to a TUN or TAP device", fd, serr)
	case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("tun fd %d: %w: not a TUN device: expected a descriptor of /dev/net/tun attached to a TUN or TAP device with TUNSETIFF, as VpnService.establish returns", fd, serr)
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
func setup(io ioctls, d devInfo, o Options, fds []int) (*Endpoint, error) {
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
			return -1, "", fmt.Errorf("tun %s: %w: this user may not open the clone device: make it readable and writable by everyone (mode 0666, as distributions ship it), or run as root", name, serr)
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
		return -1, "", explainSetIff(name, flags, err, lookupExisting(name))
	}
	return fd, ifr.Name(), nil
}

// existing is what the name of a failed TUNSETIFF is in the calling
// thread's network namespace: the kernel refuses with EINVAL both a device
// of the other type and a name that is not a TUN or TAP device at all, and
// with EPERM both a missing privilege and another user's device, so the
// error alone does not say which.
type existing struct {
	found bool
	// kind is "TUN" or "TAP", or for another device its netlink type
	// ("veth", "bridge", "device", ...).
	kind string
	// tuntap: a TUN or TAP device; multi: a multi-queue one.
	tuntap, multi bool
	// owner and group are the device's owner and group, 0 where it has
	// none (the kernel does not report them then).
	owner, group uint32
}

// lookupExisting finds out what name is, through netlink: unlike
// /sys/class/net, which shows the namespace sysfs was mounted in, netlink
// answers for the calling thread's namespace, where TUNSETIFF looked.
// Without a name (the kernel picks one) there is nothing to find.
func lookupExisting(name string) existing {
	if name == "" {
		return existing{}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return existing{}
	}
	ex := existing{found: true, kind: l.Type()}
	tt, ok := l.(*netlink.Tuntap)
	if !ok {
		return ex
	}
	ex.tuntap, ex.multi = true, tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0
	ex.owner, ex.group = tt.Owner, tt.Group
	switch {
	case tt.Mode == netlink.TUNTAP_MODE_TAP:
		ex.kind = "TAP"
	case tt.Mode == netlink.TUNTAP_MODE_TUN:
		ex.kind = "TUN"
	case l.Attrs().EncapType == "ether":
		// A kernel before 4.15 reports no TUN attributes; the link type
		// (ARPHRD_ETHER or ARPHRD_NONE) still tells the two apart.
		ex.kind = "TAP"
	default:
		ex.kind = "TUN"
	}
	return ex
}

// kindOf names the device type TUNSETIFF flags ask for.
func kindOf(flags uint16) string {
	if flags&tunTypeMask == unix.IFF_TAP {
		return "TAP"
	}
	return "TUN"
}

// explainSetIff explains err, the failure of TUNSETIFF with flags for the
// device name, which is ex.
func explainSetIff(name string, flags uint16, err error, ex existing) error {
	serr := os.NewSyscallError("ioctl TUNSETIFF", err)
	want := kindOf(flags)
	multi := flags&unix.IFF_MULTI_QUEUE != 0
	switch {
	case ex.found && !ex.tuntap && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)):
		return fmt.Errorf("tun %s: %w: the name is taken by a %s device, which is neither TUN nor TAP: pick another name", name, serr, ex.kind)
	case ex.found && ex.kind != want && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)):
		fix := "open it with Options.TAP"
		if ex.kind == "TUN" {
			fix = "open it without Options.TAP"
		}
		return fmt.Errorf("tun %s: %w: %s is a %s device, not %s: %s, or pick another name", name, serr, name, ex.kind, want, fix)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		if !ex.found {
			return fmt.Errorf("tun %s: %w: creating a %s device needs CAP_NET_ADMIN over the network namespace (in the user namespace that owns it): run as root or grant CAP_NET_ADMIN", name, serr, want)
		}
		owner := ""
		if ex.owner != 0 || ex.group != 0 {
			owner = fmt.Sprintf(" (owner uid %d, group %d)", ex.owner, ex.group)
		}
		return fmt.Errorf("tun %s: %w: %s is a %s device of another user%s: attach to it as its owner, or with CAP_NET_ADMIN over the network namespace", name, serr, name, ex.kind, owner)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("tun %s: %w: %s is a single-queue %s device that is already open: close its other user, or pick another name", name, serr, name, want)
	case errors.Is(err, unix.E2BIG):
		return fmt.Errorf("tun %s: %w: the device has the most queues the kernel allows (%d)", name, serr, MaxQueues)
	case errors.Is(err, unix.EINVAL) && ex.found:
		switch {
		case ex.multi && !multi:
			return fmt.Errorf("tun %s: %w: %s is a multi-queue device: open it with Queues > 1, or delete it", name, serr, name)
		case !ex.multi && multi:
			return fmt.Errorf("tun %s: %w: %s is a single-queue device: open it with one queue, or delete it", name, serr, name)
		}
		return fmt.Errorf("tun %s: %w: the existing device does not take these flags (%#x)", name, serr, flags)
	}
	return fmt.Errorf("tun %s: %w", name, serr)
}

// negotiate sets the virtio-net header size and the offloads (none with
// noOffload) on a device with the header, and reports what the kernel took.
func negotiate(io ioctls, d devInfo, fd int, noOffload bool) (Offloads, error) {
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
	// rxProto and rxType are the EtherType and the packet type of the TAP
	// frame being received, from parseFrame for deliver; they belong to
	// the holder of gate.Owner.
	rxProto tcpip.NetworkProtocolNumber
	rxType  tcpip.PacketType
	// gro coalesces the TCP segments of one receive round, and rxd is
	// the round's dispatcher (nil: detached); both belong to the holder
	// of gate.Owner.
	gro linkutil.GRO
	rxd stack.NetworkDispatcher
	counters
}

// newEndpoint builds an endpoint over open, non-blocking, non-negative
// descriptors of the device d, one per queue, and owns them from then on.
// A TAP device (IFF_TAP in d's flags) needs o.MAC set (normalize sets it
// when o.TAP).
// It starts no goroutine: Attach starts the receive goroutines, a queue's
// first refused write its watcher. Tests call it with socketpairs.
func newEndpoint(d devInfo, o Options, off Offloads, fds []int) *Endpoint {
	name := d.name
	e := &Endpoint{name: name, multiQueue: d.flags&unix.IFF_MULTI_QUEUE != 0, opts: o, offloads: off, stop: make(chan struct{})}
	if d.flags&tunTypeMask == unix.IFF_TAP {
		e.tap, e.linkHdr = true, header.EthernetMinimumSize
		mac := tcpip.LinkAddress(o.MAC)
		e.mac.Store(&mac)
		e.eth = newEthernet(e)
	}
	switch {
	case off.TSO():
		e.gsoKind = stack.HostGSOSupported
	case o.NoSoftwareGSO:
		e.gsoKind = stack.GSONotSupported
	default:
		e.gsoKind = stack.GVisorGSOSupported
	}
	e.mtu.Store(o.MTU + uint32(e.linkHdr))
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
			q.setupRXRing(o.MTU + uint32(e.linkHdr))
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
