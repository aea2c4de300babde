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
	defer ns.Close()
	return ns.Do(func() error {
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
}

// New creates a named network namespace (visible as /run/netns/NAME to
// `ip netns`). The name gets the process ID appended so that parallel runs
// never collide. The calling goroutine's namespace is unchanged.
func New(name string) (*NS, error) {
	name = fmt.Sprintf("%s-%d", name, os.Getpid())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netns %s: read the current namespace: %w", name, err)
	}
	defer orig.Close()
	// A namespace left by a killed run of this PID would make NewNamed fail.
	_ = netns.DeleteNamed(name)
	h, err := netns.NewNamed(name)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("netns %s: %w", name, ErrNoPrivilege)
		}
		return nil, fmt.Errorf("netns %s: create: %w", name, err)
	}
	// NewNamed moved this thread into the new namespace: move it back
	// before the thread is unlocked and reused by other goroutines.
	if err := netns.Set(orig); err != nil {
		h.Close()
		_ = netns.DeleteNamed(name)
		// This thread is now in the wrong namespace: keep it locked so it
		// dies with this goroutine instead of serving others.
		runtime.LockOSThread()
		return nil, fmt.Errorf("netns %s: return to the original namespace: %w", name, err)
	}
	ns := &NS{Name: name, handle: h}
	if err := ns.Do(func() error { return setUp("lo") }); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
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
// with one end in it is deleted whole). Idempotent.
func (ns *NS) Close() error {
	if ns.closed.Swap(true) {
		return nil
	}
	ns.handle.Close()
	return netns.DeleteNamed(ns.Name)
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
