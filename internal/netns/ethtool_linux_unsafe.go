//go:build linux

package netns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolValue is struct ethtool_value (linux/ethtool.h): the argument of
// the legacy one-feature ethtool commands.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ethtoolIfreq is struct ifreq with its union as ifr_data, the pointer
// SIOCETHTOOL reads its command from; the padding makes it at least the
// kernel's size (40 bytes on 64-bit machines, where the union is 24).
// x/sys's Ifreq cannot hold a pointer.
type ethtoolIfreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(unsafe.Pointer(nil))]byte
}

// offloadCommands are the offloads SetOffloads switches, each as its
// legacy set and get commands, in the order that turns them off
// (dependants first: the kernel also drops TSO by itself once
// scatter-gather or checksumming goes); on goes in reverse.
var offloadCommands = []struct {
	set, get uint32
	name     string
}{
	{unix.ETHTOOL_SGRO, unix.ETHTOOL_GGRO, "generic-receive-offload"},
	{unix.ETHTOOL_SGSO, unix.ETHTOOL_GGSO, "generic-segmentation-offload"},
	{unix.ETHTOOL_STSO, unix.ETHTOOL_GTSO, "tcp-segmentation-offload"},
	{unix.ETHTOOL_SSG, unix.ETHTOOL_GSG, "scatter-gather"},
	{unix.ETHTOOL_STXCSUM, unix.ETHTOOL_GTXCSUM, "tx-checksumming"},
}

// ethtool runs one legacy ethtool command on the named interface through
// fd and returns the value the kernel wrote back (a get's answer).
func ethtool(fd int, ifname string, cmd, data uint32) (uint32, error) {
	v := ethtoolValue{cmd: cmd, data: data}
	var ifr ethtoolIfreq
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(&v)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return 0, e
	}
	return v.data, nil
}

// withEthtool calls f with a socket for ethtool commands in the calling
// thread's namespace.
func withEthtool(ifname string, f func(fd int) error) error {
	if len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("link %s: name longer than %d bytes", ifname, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("link %s: socket for ethtool: %w", ifname, err)
	}
	defer unix.Close(fd)
	return f(fd)
}

// setOffloads switches the named interface's segmentation, receive
// coalescing, scatter-gather and transmit checksum offloads, as `ethtool
// -K IFACE gro off gso off tso off sg off tx off` does, in the calling
// thread's namespace, and reads them back: the kernel refuses a command
// only when the driver fixes all of its flags (TSO is four), and leaves
// the fixed ones as they are otherwise.
func setOffloads(ifname string, on bool) error {
	var data uint32
	state := "off"
	if on {
		data, state = 1, "on"
	}
	err := withEthtool(ifname, func(fd int) error {
		for i := range offloadCommands {
			c := offloadCommands[i]
			if on {
				c = offloadCommands[len(offloadCommands)-1-i]
			}
			if _, err := ethtool(fd, ifname, c.set, data); err != nil {
				return fmt.Errorf("link %s: ethtool %s %s: %w", ifname, c.name, state, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, err := offloads(ifname)
	if err != nil {
		return err
	}
	for _, c := range offloadCommands {
		if got[c.name] != on {
			return fmt.Errorf("link %s: ethtool %s %s: the driver left it %s (a fixed flag)", ifname, c.name, state, map[bool]string{true: "on", false: "off"}[got[c.name]])
		}
	}
	return nil
}

// offloads reports which of offloadCommands' offloads the named interface
// has on, by name, in the calling thread's namespace.
func offloads(ifname string) (map[string]bool, error) {
	on := map[string]bool{}
	err := withEthtool(ifname, func(fd int) error {
		for _, c := range offloadCommands {
			v, err := ethtool(fd, ifname, c.get, 0)
			if err != nil {
				return fmt.Errorf("link %s: ethtool get %s: %w", ifname, c.name, err)
			}
			on[c.name] = v != 0
		}
		return nil
	})
	return on, err
}
