package sandbox

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/ustack-dev/ustack/link/tun"
)

// deviceSpec is the sandbox's device as the namespace's side makes it:
// a TUN or TAP device, configured or left to its creator. Root makes it
// on a thread inside the namespace (namespace.openDevice), a rootless
// sandbox in its helper (helperMain); both through createDevice, and the
// helper gets it as JSON.
type deviceSpec struct {
	Device      string
	TAP         bool
	MAC         net.HardwareAddr // the device's (kernel side's) MAC; nil: the kernel's
	NoConfigure bool
	MTU         uint32 // 0 with NoConfigure: the device's own
	NoOffload   bool
	Queues      int
	Addrs       []netip.Prefix
	Gateway4    netip.Addr
	Gateway6    netip.Addr
	NoIPv6      bool
	Host        bool // in this process's own namespace: no route, lo left alone
}

// deviceSpec is what c asks of the device.
func (c *Config) deviceSpec() deviceSpec {
	s := deviceSpec{
		Device: c.Device, TAP: c.TAP, MAC: c.MAC, NoConfigure: c.NoConfigure,
		MTU: c.MTU, NoOffload: c.NoOffload, Queues: c.Queues,
		Gateway4: c.Gateway4, Gateway6: c.Gateway6, NoIPv6: c.NoIPv6, Host: c.Host,
	}
	if !c.NoConfigure {
		s.Addrs = []netip.Prefix{c.Addr4}
		if !c.NoIPv6 {
			s.Addrs = append(s.Addrs, c.Addr6)
		}
	}
	return s
}

// tunOptions are the options the device is created with.
func (s *deviceSpec) tunOptions() *tun.Options {
	return &tun.Options{TAP: s.TAP, NoConfigure: s.NoConfigure, Queues: s.Queues, NoOffload: s.NoOffload, MTU: s.MTU, Addrs: s.Addrs}
}

// configure finishes the device's setup in the calling thread's network
// namespace once it exists, unless NoConfigure: its MAC, and but for
// Host the default routes through the gateway and the namespace's
// loopback up.
func (s *deviceSpec) configure(name string) error {
	if s.NoConfigure {
		return nil
	}
	if len(s.MAC) > 0 {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("sandbox: find %s: %w", name, err)
		}
		if err := netlink.LinkSetHardwareAddr(l, s.MAC); err != nil {
			return fmt.Errorf("sandbox: set %s's MAC address to %v: %w", name, s.MAC, err)
		}
	}
	if s.Host {
		return nil // the host's routes are its owner's
	}
	if err := routeVia(name, s.Gateway4, s.Gateway6, s.NoIPv6); err != nil {
		return err
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("sandbox: set lo up in the namespace: %w", err)
		}
	}
	return nil
}

// createDevice creates (or attaches to) the device in the calling
// thread's network namespace and configures it as s says: what the
// rootless helper does, whose descriptor goes to the parent.
func createDevice(s *deviceSpec) (*tun.Device, error) {
	dev, err := tun.Create(s.Device, s.tunOptions())
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := s.configure(dev.Name); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// routeVia makes the gateways the namespace's default routes through dev.
func routeVia(dev string, gw4, gw6 netip.Addr, noIPv6 bool) error {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("sandbox: find %s: %w", dev, err)
	}
	routes := []*netlink.Route{{
		LinkIndex: l.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Gw:        net.IP(gw4.AsSlice()),
	}}
	if !noIPv6 {
		routes = append(routes, &netlink.Route{
			LinkIndex: l.Attrs().Index,
			Dst:       &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
			Gw:        net.IP(gw6.AsSlice()),
		})
	}
	for _, r := range routes {
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("sandbox: default route via %v on %s: %w", r.Gw, dev, err)
		}
	}
	return nil
}
