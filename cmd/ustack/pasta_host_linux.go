package main

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostAddressing finds what pasta copies into the namespace from the
// host, for IPv4 and IPv6: the interface ifname (or, if "", the one of
// the first default route of each version), its first address of the
// version with its prefix length, and the default gateway through it.
// A version without a usable interface is nil.
func hostAddressing(ifname string) (v4, v6 *hostIface, err error) {
	var link netlink.Link
	if ifname != "" {
		if link, err = netlink.LinkByName(ifname); err != nil {
			return nil, nil, fmt.Errorf("interface %s: %w", ifname, err)
		}
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		h, err := hostIfaceOf(link, family)
		if err != nil {
			return nil, nil, err
		}
		if family == netlink.FAMILY_V4 {
			v4 = h
		} else {
			v6 = h
		}
	}
	return v4, v6, nil
}

// hostIfaceOf is hostAddressing for one family, link nil for the
// interface of the first default route.
func hostIfaceOf(link netlink.Link, family int) (*hostIface, error) {
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("the host's routes: %w", err)
	}
	want := 0
	if link != nil {
		want = link.Attrs().Index
	}
	// The default route of the lowest metric (through link, if given).
	var def *netlink.Route
	for i := range routes {
		r := &routes[i]
		if ones, _ := maskOf(r); ones != 0 || r.Gw == nil || want != 0 && r.LinkIndex != want {
			continue
		}
		if def == nil || r.Priority < def.Priority {
			def = r
		}
	}
	if def == nil {
		return nil, nil // no default route of this version
	}
	gw, ok := netip.AddrFromSlice(def.Gw)
	if !ok {
		return nil, nil
	}
	if link == nil {
		if link, err = netlink.LinkByIndex(def.LinkIndex); err != nil {
			return nil, fmt.Errorf("the host's default route's interface: %w", err)
		}
	}
	addrs, err := netlink.AddrList(link, family)
	if err != nil {
		return nil, fmt.Errorf("the addresses of %s: %w", link.Attrs().Name, err)
	}
	for _, ad := range addrs {
		a, ok := netip.AddrFromSlice(ad.IP)
		if !ok || ad.Scope != unix.RT_SCOPE_UNIVERSE {
			continue
		}
		ones, _ := ad.Mask.Size()
		return &hostIface{Name: link.Attrs().Name, Addr: netip.PrefixFrom(a.Unmap(), ones), Gateway: gw.Unmap()}, nil
	}
	return nil, nil
}

// maskOf is the prefix length of r's destination, 0 for a default route.
func maskOf(r *netlink.Route) (ones, bits int) {
	if r.Dst == nil {
		return 0, 0
	}
	return r.Dst.Mask.Size()
}
