package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NS is a named network namespace that this process created. It is safe
// for concurrent use.
type NS struct {
	Name   string
	handle netns.NsHandle
	closed atomic.Bool
}

// ErrNoPrivilege is returned when the process may not create namespaces.
var ErrNoPrivilege = errors.New("creating network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")

// NoPrivilege reports whether err is the kernel refusing an operation for
// lack of privilege (EPERM or EACCES anywhere in its chain, or
// ErrNoPrivilege), as opposed to any other failure. Privileged tests skip
// on the first and fail on the second: a missing capability is the
// caller's situation, a broken environment is a fault to report.
func NoPrivilege(err error) bool {
	return errors.Is(err, ErrNoPrivilege) || errors.Is(err, os.ErrPermission)
}

// Probe reports whether this process can create a network namespace and a
// veth pair in it, by doing so; the error says why not, and NoPrivilege
// tells a missing privilege from a broken environment.
func Probe() error {
	ns, err := New("ustack-probe")
	if err != nil {
		return err
	}
	err = ns.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "probe0"
		v := &netlink.Veth{LinkAttrs: la, PeerName: "probe1"}
		if err := netlink.LinkAdd(v); err != nil {
			if errors.Is(err, os.ErrPermission) {
				return fmt.Errorf("create a veth pair: %w: needs CAP_NET_ADMIN in the namespace", err)
			}
			return fmt.Errorf("create a veth pair: %w", err)
		}
		return netlink.LinkDel(v)
	})
	return errors.Join(err, ns.Close())
}

// runDir is where named namespaces are mounted, for `ip netns` (which
// looks in /var/run/netns, the same directory on any system whose /var/run
// links to /run) and vishvananda/netns's NewNamed and DeleteNamed.
const runDir = "/run/netns"

// seq numbers the namespaces this process creates, for their names.
var seq atomic.Uint64

// New creates a named network namespace (visible as /run/netns/NAME to
// `ip netns`). The name gets the process ID and a number of its own
// appended, so that neither parallel runs nor two namespaces of one run
// ever collide, even when one was not deleted. The calling goroutine's
// namespace is unchanged.
func New(name string) (*NS, error) {
	name = fmt.Sprintf("%s-%d-%d", name, os.Getpid(), seq.Add(1))
	if err := shareRunDir(); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("netns %s: %w: %w", name, err, ErrNoPrivilege)
		}
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netns %s: read the current namespace: %w", name, err)
	}
	defer orig.Close()
	// A namespace left by a killed run that had this PID would make
	// NewNamed fail.
	_ = netns.DeleteNamed(name)
	h, err := netns.NewNamed(name)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("netns %s: create: %w: %w", name, err, ErrNoPrivilege)
		}
		return nil, fmt.Errorf("netns %s: create: %w", name, err)
	}
	// NewNamed moved this thread into the new namespace: move it back
	// before the thread is unlocked and reused by other goroutines.
	if err := netns.Set(orig); err != nil {
		h.Close()
		derr := netns.DeleteNamed(name)
		// This thread is now in the wrong namespace: keep it locked so it
		// dies with this goroutine instead of serving others.
		runtime.LockOSThread()
		return nil, errors.Join(fmt.Errorf("netns %s: return to the original namespace: %w", name, err), derr)
	}
	ns := &NS{Name: name, handle: h}
	if err := ns.Do(func() error { return setUp("lo") }); err != nil {
		return nil, errors.Join(err, ns.Close())
	}
	return ns, nil
}

// shareRunDir makes runDir a mount point of its own with shared
// propagation before a namespace is mounted in it, as `ip netns add` does
// (iproute2's netns_add): make it shared, and where that fails with EINVAL
// because it is no mount point yet, bind-mount it onto itself and try
// again. Done first by whoever names a namespace, it is then never done
// again while a namespace is mounted there. Were it done later, by an `ip
// netns add` while one of ours exists, the bind mount would cover ours
// with a copy: our Close would unmount the copy and fail to remove the
// file (EBUSY, the hidden mount still sits on it), leaving the namespace
// and its name behind. The directory's lock, which iproute2 also takes
// around these steps, keeps two processes from stacking bind mounts.
func shareRunDir() error {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", runDir, err)
	}
	fd, err := unix.Open(runDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", runDir, os.NewSyscallError("open", err))
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", runDir, os.NewSyscallError("flock", err))
	}
	// Closing fd releases the lock.
	bound := false
	for {
		err := unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if err != unix.EINVAL || bound {
			return fmt.Errorf("mount --make-shared %s: %w", runDir, os.NewSyscallError("mount", err))
		}
		if err := unix.Mount(runDir, runDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount --bind %s onto itself: %w", runDir, os.NewSyscallError("mount", err))
		}
		bound = true
	}
}

// Do runs f on a thread inside the namespace: sockets f opens and devices
// it creates belong to the namespace, and keep belonging to it after Do
// returns. Other goroutines are not affected.
func (ns *NS) Do(f func() error) error {
	if ns.closed.Load() {
		return fmt.Errorf("netns %s: closed", ns.Name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", ns.Name, err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: enter: %w", ns.Name, err)
			return
		}
		err = f()
		if serr := netns.Set(orig); serr != nil {
			// Leave the thread locked: it exits with this goroutine rather
			// than run others in the wrong namespace.
			errc <- errors.Join(err, fmt.Errorf("netns %s: leave: %w", ns.Name, serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Close deletes the namespace. Interfaces in it go with it (a veth pair
// with one end in it is deleted whole). Idempotent. An error means the
// name, and with it the namespace, may be left behind: tests fail on it.
func (ns *NS) Close() error {
	if ns.closed.Swap(true) {
		return nil
	}
	herr := ns.handle.Close()
	if err := netns.DeleteNamed(ns.Name); err != nil {
		// EINVAL: the name is no mount point here any more (its bind
		// mount is gone, or covered by a mount made since): the name
		// itself is all that is left to remove.
		path := filepath.Join(runDir, ns.Name)
		if !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("netns %s: delete %s: %w", ns.Name, path, err)
		}
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("netns %s: delete %s: %w (and it is no mount point: %v)", ns.Name, path, rerr, err)
		}
	}
	if herr != nil {
		return fmt.Errorf("netns %s: close its handle: %w", ns.Name, herr)
	}
	return nil
}

// Veth creates a veth pair with one end (nameA) in a and the other (nameB)
// in b, both up, with the given MTU (0 keeps the default).
func Veth(a *NS, nameA string, b *NS, nameB string, mtu int) error {
	return a.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name = nameA
		la.MTU = mtu
		v := &netlink.Veth{LinkAttrs: la, PeerName: nameB, PeerNamespace: netlink.NsFd(int(b.handle))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("veth %s/%s: create: %w", nameA, nameB, err)
		}
		if mtu > 0 {
			if err := b.Do(func() error { return setMTU(nameB, mtu) }); err != nil {
				return err
			}
		}
		if err := setUp(nameA); err != nil {
			return err
		}
		return b.Do(func() error { return setUp(nameB) })
	})
}

func setUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("link %s: set up: %w", name, err)
	}
	return nil
}

func setMTU(name string, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("link %s: set MTU %d: %w", name, mtu, err)
	}
	return nil
}

// AddAddr assigns prefixes to the named interface in ns. IPv6 addresses
// are added with duplicate address detection off, so they are usable at
// once.
func (ns *NS) AddAddr(ifname string, prefixes ...netip.Prefix) error {
	return ns.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("link %s: %w", ifname, err)
		}
		for _, p := range prefixes {
			a, err := netlink.ParseAddr(p.String())
			if err != nil {
				return err
			}
			if p.Addr().Is6() {
				a.Flags |= unix.IFA_F_NODAD
			}
			if err := netlink.AddrAdd(l, a); err != nil {
				return fmt.Errorf("link %s: add %v: %w", ifname, p, err)
			}
		}
		return nil
	})
}

// Sysctl writes a value under /proc/sys/net inside ns, e.g.
// Sysctl("ipv6/conf/eth0/disable_ipv6", "1").
func (ns *NS) Sysctl(path, value string) error {
	return ns.Do(func() error {
		p := filepath.Join("/proc/sys/net", path)
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl net/%s=%s: %w", path, strings.TrimSpace(value), err)
		}
		return nil
	})
}

// SetUp brings an interface in ns up.
func (ns *NS) SetUp(ifname string) error { return ns.Do(func() error { return setUp(ifname) }) }

// SetMTU sets an interface's MTU in ns.
func (ns *NS) SetMTU(ifname string, mtu int) error {
	return ns.Do(func() error { return setMTU(ifname, mtu) })
}

// SetOffloads switches an interface's offloads in ns: segmentation (TSO,
// GSO), receive coalescing (GRO), scatter-gather and transmit
// checksumming, as `ethtool -K` does. With them off the kernel sends and
// receives packets of at most the MTU, each with its checksum computed:
// the kernel's own cost without offloads, to compare a stack against.
func (ns *NS) SetOffloads(ifname string, on bool) error {
	return ns.Do(func() error { return setOffloads(ifname, on) })
}

// DeleteLink deletes an interface in ns (a veth pair goes whole).
func (ns *NS) DeleteLink(ifname string) error {
	return ns.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("link %s: %w", ifname, err)
		}
		return netlink.LinkDel(l)
	})
}
