//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

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
	devs := make([]*device, len(fds))
	for i, fd := range fds {
		d, err := newDevice(fd, fmt.Sprintf("%s:%s#%d", cloneDevice, name, i))
		if err != nil {
			for _, d := range devs[:i] {
				d.close()
			}
			fds = fds[i+1:] // newDevice closed fds[i]; the deferred cleanup closes the rest
			return nil, fmt.Errorf("tun %s: queue %d: %w", name, i, err)
		}
		devs[i] = d
	}
	ok = true
	return newEndpoint(name, o, off, devs), nil
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

// device is one queue's file descriptor, registered with Go's runtime
// poller so that waiting for it parks a goroutine, not a thread.
type device struct {
	fd   int
	file *os.File
	rc   syscall.RawConn

	// mu is held for reading by every write, which uses fd directly
	// (through rc a write would allocate a closure per packet), and for
	// writing by close, so fd is never written after it is closed.
	mu     sync.RWMutex
	closed bool // guarded by mu

	rxErr error // the read failure that stopped the receive goroutine, which alone touches it
}

func newDevice(fd int, name string) (*device, error) {
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		// f owns fd now: closing it closes fd.
		f.Close()
		return nil, fmt.Errorf("register with the runtime poller: %w", err)
	}
	return &device{fd: fd, file: f, rc: rc}, nil
}

// close closes the descriptor: it waits for writes in progress, wakes the
// goroutines parked on it (their RawConn calls fail), and waits for a
// receive round in progress to end. Idempotent.
func (d *device) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	d.mu.Unlock()
	d.file.Close()
}

// write writes one packet behind header h to the queue.
func (q *queue) write(h vnet.Header, pkt *stack.PacketBuffer) (txOutcome, tcpip.Error) {
	var hb [vnet.HeaderSize]byte
	hdr := hb[:0]
	if q.e.offloads.VNetHeader {
		h.Encode(hb[:])
		hdr = hb[:]
	}
	d := q.dev
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return txClosed, nil
	}
	var errno unix.Errno
	for {
		errno = writePacket(d.fd, hdr, pkt)
		q.txSyscalls.Add(1)
		if errno != unix.EINTR {
			break
		}
	}
	d.mu.RUnlock()
	switch errno {
	case 0:
		return txSent, nil
	case unix.EAGAIN:
		return txFull, nil
	case unix.EBADFD, unix.ENXIO, unix.ENODEV:
		// The device was deleted: the queue is detached for good.
		q.e.fail(os.NewSyscallError("writev", errno))
		return txGone, nil
	}
	return txFailed, tcpip.TranslateErrno(errno)
}

// errEOF is the read failure of a descriptor at end of file.
var errEOF = errors.New("read: end of file")

// rxLoop is a queue's receive goroutine: rounds of up to a batch of reads,
// parked in the runtime poller while the queue is empty. It ends when Close
// closes the descriptor, or when the device fails.
func (q *queue) rxLoop() {
	defer q.e.wg.Done()
	read := q.readRound // bound once: rc.Read then allocates nothing
	for {
		// While busy-polling readers drive the queue, stand aside until
		// the last one stops or the watchdog calls (linkutil.PollGate).
		if !q.gate.WaitTurn(q.e.stop) {
			return
		}
		if err := q.dev.rc.Read(read); err != nil {
			return // closed
		}
		if q.dev.rxErr != nil {
			q.e.fail(q.dev.rxErr)
			return
		}
	}
}

// readRound runs in rc.Read with the queue's descriptor. It reads and
// delivers up to a batch of packets. It returns false, to park until the
// descriptor is readable, when the queue is empty; true after a full batch,
// so that rxLoop goes round again (where Close can stop it), after a
// failure, recorded in the device's rxErr, or at once when busy-polling
// readers have the queue.
func (q *queue) readRound(fd uintptr) bool {
	if q.gate.Deferring() {
		return true
	}
	q.gate.Owner.Lock()
	defer q.gate.Owner.Unlock()
	q.gate.Received()
	n, again, err := q.roundLocked(fd)
	if err != nil {
		q.dev.rxErr = err
		return true
	}
	if n > 0 {
		q.rxRounds.Add(1)
	}
	if !again {
		q.park() // the queue is empty: the receive goroutine parks
	}
	return again
}

// roundLocked reads and delivers up to a batch of packets, holding
// q.gate.Owner. again is false when the queue ran empty; err is a failure
// that ends the queue.
func (q *queue) roundLocked(fd uintptr) (n int, again bool, err error) {
	buf := q.landing()
	for n < q.e.opts.RXBatch {
		m, rerr := unix.Read(int(fd), buf)
		q.rxSyscalls.Add(1)
		switch {
		case rerr == nil && m == 0:
			// End of file. A TUN device never hands over an empty
			// packet; anything else that reads 0 is finished, and would
			// poll readable forever.
			return n, true, errEOF
		case rerr == nil:
			q.receive(buf[:m])
			n++
		case errors.Is(rerr, unix.EAGAIN):
			return n, false, nil
		case errors.Is(rerr, unix.EINTR):
		default:
			// EBADFD once the device is deleted (EIO and ENXIO on older
			// kernels): every further read would fail the same way, and
			// the poller would report the descriptor ready forever.
			q.rxErrors.Add(1)
			return n, true, os.NewSyscallError("read", rerr)
		}
	}
	return n, true, nil
}

// busyPoll runs one non-blocking receive round for a busy-polling reader,
// unless another goroutine is receiving, and returns the packets read. A
// failure is left to the receive goroutine, which it wakes.
func (q *queue) busyPoll() int {
	if !q.gate.Owner.TryLock() {
		return 0
	}
	defer q.gate.Owner.Unlock()
	if q.pollRound == nil {
		q.pollRound = func(fd uintptr) { q.pollN, _, q.pollErr = q.roundLocked(fd) }
	}
	if q.dev.rc.Control(q.pollRound) != nil {
		return 0 // closed
	}
	n, err := q.pollN, q.pollErr
	if n > 0 {
		q.rxRounds.Add(1)
		q.gate.CountPolled()
	}
	if err != nil {
		q.gate.Force()
	}
	return n
}

// watchLoop is a queue's watcher goroutine: woken after a refused write,
// it parks in the runtime poller until the descriptor is writable, then
// signals the writer. Started by the first refusal, ended by Close.
func (q *queue) watchLoop() {
	defer q.e.wg.Done()
	var pfd [1]unix.PollFd
	writable := func(fd uintptr) bool {
		pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
		n, err := unix.Poll(pfd[:], 0)
		// Any event counts, POLLERR and POLLHUP too: the next write then
		// succeeds or fails for good, and either is what the writer must
		// learn. A failed poll is treated the same way, never as a reason
		// to wait.
		return err != nil || n > 0
	}
	for {
		select {
		case <-q.kick:
		case <-q.e.stop:
			return
		}
		// rc.Write arms the poller before it first calls writable, so room
		// made after the check wakes it: no lost wake-up.
		if err := q.dev.rc.Write(writable); err != nil {
			return // closed
		}
		q.signalWritable()
	}
}

// signalWritable calls the registered writability function if a write was
// refused since the last signal.
func (q *queue) signalWritable() {
	if !q.wantWritable.Swap(false) {
		return
	}
	if f := q.e.writable.Load(); f != nil {
		(*f)()
	}
}

// fail records the first device failure: err says which system call
// failed and how.
func (e *Endpoint) fail(err error) {
	var werr error = &goneError{name: e.name, err: err}
	e.err.CompareAndSwap(nil, &werr)
}

// goneError is what Err returns: it matches ErrDeviceGone and the
// underlying error (an *os.SyscallError with the errno) with errors.Is.
type goneError struct {
	name string
	err  error
}

func (g *goneError) Error() string {
	return fmt.Sprintf("tun %s: device went away: %v: close the endpoint, and open the device again to go on", g.name, g.err)
}

func (g *goneError) Unwrap() []error { return []error{ErrDeviceGone, g.err} }
