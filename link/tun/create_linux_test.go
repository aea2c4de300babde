//go:build linux

package tun

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/testenv"
)

// TestTunExplainSetIff: a failed TUNSETIFF is explained by what the name
// is: a device of the other type, something that is neither TUN nor TAP,
// another user's device, or nothing (a missing privilege); the errno
// stays in the chain.
func TestTunExplainSetIff(t *testing.T) {
	const tun, tap = unix.IFF_TUN | unix.IFF_NO_PI, unix.IFF_TAP | unix.IFF_NO_PI
	for _, tc := range []struct {
		name  string
		flags uint16
		err   unix.Errno
		ex    existing
		want  string
	}{
		{"tap asked as tun", tun, unix.EINVAL, existing{found: true, tuntap: true, kind: "TAP"},
			"tun tap0: ioctl TUNSETIFF: invalid argument: tap0 is a TAP device, not TUN: open it with Options.TAP, or pick another name"},
		{"tun asked as tap", tap, unix.EINVAL, existing{found: true, tuntap: true, kind: "TUN"},
			"tap0 is a TUN device, not TAP: open it without Options.TAP, or pick another name"},
		{"not tun or tap", tap, unix.EINVAL, existing{found: true, kind: "veth"},
			"the name is taken by a veth device, which is neither TUN nor TAP: pick another name"},
		{"no privilege to create", tap, unix.EPERM, existing{},
			"creating a TAP device needs CAP_NET_ADMIN over the network namespace"},
		{"another user's", tap, unix.EPERM, existing{found: true, tuntap: true, kind: "TAP", owner: 1000, group: 1000},
			"tap0 is a TAP device of another user (owner uid 1000, group 1000): attach to it as its owner, or with CAP_NET_ADMIN"},
		{"another user's, no owner known", tap, unix.EPERM, existing{found: true, tuntap: true, kind: "TAP"},
			"tap0 is a TAP device of another user: attach to it"},
		{"single queue in use", tun, unix.EBUSY, existing{found: true, tuntap: true, kind: "TUN"},
			"tap0 is a single-queue TUN device that is already open"},
		{"multi-queue asked as single", tun, unix.EINVAL, existing{found: true, tuntap: true, kind: "TUN", multi: true},
			"tap0 is a multi-queue device: open it with Queues > 1"},
		{"single asked as multi-queue", tun | unix.IFF_MULTI_QUEUE, unix.EINVAL, existing{found: true, tuntap: true, kind: "TUN"},
			"tap0 is a single-queue device: open it with one queue"},
		{"other flags", tun, unix.EINVAL, existing{found: true, tuntap: true, kind: "TUN"},
			"the existing device does not take these flags"},
		{"gone meanwhile", tun, unix.EINVAL, existing{},
			"tun tap0: ioctl TUNSETIFF: invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := explainSetIff("tap0", tc.flags, tc.err, tc.ex)
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, err, tc.err)
			var serr *os.SyscallError
			require.True(t, errors.As(err, &serr), "an os.SyscallError in the chain")
			if tc.ex.found {
				require.NotContains(t, err.Error(), "needs CAP_NET_ADMIN over the network namespace (in the user namespace", "an existing device is no missing privilege")
			}
		})
	}
}

// testNS builds a network namespace for a test that creates devices, and
// deletes it when the test ends; without the privilege the test skips
// (through testenv).
func testNS(t *testing.T, name string) *netns.NS {
	t.Helper()
	ns, err := netns.New(name)
	if err != nil {
		if netns.NoPrivilege(err) {
			testenv.Skip(t, "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to build a network namespace and devices in it: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestTunCreateWrongType: against the kernel, a name taken by a device of
// the other type, or by one that is neither TUN nor TAP, is refused with
// an error that says what it is, never a capability complaint.
func TestTunCreateWrongType(t *testing.T) {
	ns := testNS(t, "tun-wrongtype")
	cases := []struct {
		name string
		tap  bool
		want string
	}{
		{"tap0", false, "tun tap0: ioctl TUNSETIFF: invalid argument: tap0 is a TAP device, not TUN: open it with Options.TAP, or pick another name"},
		{"tun0", true, "tun tun0: ioctl TUNSETIFF: invalid argument: tun0 is a TUN device, not TAP: open it without Options.TAP, or pick another name"},
		{"veth0", true, "tun veth0: ioctl TUNSETIFF: invalid argument: the name is taken by a veth device, which is neither TUN nor TAP: pick another name"},
		{"veth1", false, "the name is taken by a veth device, which is neither TUN nor TAP"},
	}
	// What Create and Open say, per case; and what Create says of a
	// single-queue device in use.
	var created, opened []error
	var busy error
	require.NoError(t, ns.Do(func() error {
		tap, err := Open("tap0", &Options{TAP: true, NoUp: true})
		if err != nil {
			return err
		}
		defer tap.Close()
		tn, err := Open("tun0", &Options{NoUp: true})
		if err != nil {
			return err
		}
		defer tn.Close()
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}); err != nil {
			return err
		}
		for _, tc := range cases {
			_, err := Create(tc.name, &Options{TAP: tc.tap, NoConfigure: true, MTU: DefaultMTU})
			created = append(created, err)
			_, err = Open(tc.name, &Options{TAP: tc.tap})
			opened = append(opened, err)
		}
		_, busy = Create("tap0", &Options{TAP: true, NoConfigure: true})
		return nil
	}))
	for i, tc := range cases {
		require.ErrorContains(t, created[i], tc.want)
		require.ErrorIs(t, created[i], unix.EINVAL)
		require.NotContains(t, created[i].Error(), "CAP_NET_ADMIN")
		require.ErrorContains(t, opened[i], tc.want, "Open says the same")
	}
	// The right type attaches where the device has a queue free: a
	// single-queue device in use is busy, and said to be.
	require.ErrorIs(t, busy, unix.EBUSY)
	require.ErrorContains(t, busy, "tap0 is a single-queue TAP device that is already open")
}

// noConfigureSeen is what TestTunCreateNoConfigure observes inside its
// namespace.
type noConfigureSeen struct {
	dev              *Device
	dupFlags         uint16 // TUNGETIFF on the Device's descriptor
	up               bool
	addrs            int
	outlived         error // LinkByName after the Device's Close
	configured       netlink.Link
	configuredAddrs  int
	endpointMTU      uint32
	createErr, ifErr error
	openErr          error
}

// TestTunCreateNoConfigure: Create attaches to a persistent TAP device by
// name and, with NoConfigure, touches nothing of it: the link stays down,
// with no address and its MTU, which the Device reports; closing its
// descriptors leaves the persistent device in place. Without NoConfigure
// the same device is configured as asked.
func TestTunCreateNoConfigure(t *testing.T) {
	ns := testNS(t, "tun-noconf")
	var seen noConfigureSeen
	require.NoError(t, ns.Do(func() error {
		// A persistent TAP device, as `ip tuntap add dev tap1 mode tap`
		// leaves one (netlink's Tuntap is made persistent unless
		// NonPersist), with an MTU of its own.
		tt := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: "tap1"}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI}
		if err := netlink.LinkAdd(tt); err != nil {
			return err
		}
		for _, f := range tt.Fds {
			f.Close()
		}
		l, err := netlink.LinkByName("tap1")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, 9000); err != nil {
			return err
		}

		seen.dev, seen.createErr = Create("tap1", &Options{TAP: true, NoConfigure: true})
		if seen.createErr != nil {
			return nil
		}
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return err
		}
		seen.ifErr = unix.IoctlIfreq(seen.dev.FDs[0], unix.TUNGETIFF, ifr)
		seen.dupFlags = ifr.Uint16()
		if l, err = netlink.LinkByName("tap1"); err != nil {
			return err
		}
		seen.up = l.Attrs().Flags&net.FlagUp != 0
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		seen.addrs = len(addrs)
		seen.dev.Close()
		seen.dev.Close() // idempotent
		_, seen.outlived = netlink.LinkByName("tap1")

		e, err := Open("tap1", &Options{TAP: true, MTU: 1500, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.31.1/24")}})
		if seen.openErr = err; err != nil {
			return nil
		}
		defer e.Close()
		seen.endpointMTU = e.Ethernet().MTU()
		if seen.configured, err = netlink.LinkByName("tap1"); err != nil {
			return err
		}
		addrs, err = netlink.AddrList(seen.configured, netlink.FAMILY_V4)
		seen.configuredAddrs = len(addrs)
		return err
	}))
	require.NoError(t, seen.createErr)
	d := seen.dev
	require.Equal(t, "tap1", d.Name)
	require.True(t, d.TAP)
	require.Equal(t, uint32(9000), d.MTU, "the device's own MTU")
	require.Empty(t, d.FDs, "closed")
	require.NoError(t, seen.ifErr)
	require.Equal(t, uint16(unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR), seen.dupFlags&^unix.IFF_PERSIST)
	require.False(t, seen.up, "left down")
	require.Zero(t, seen.addrs, "no address added")
	require.NoError(t, seen.outlived, "a persistent device outlives its descriptors")

	require.NoError(t, seen.openErr)
	require.Equal(t, 1500, seen.configured.Attrs().MTU)
	require.NotZero(t, seen.configured.Attrs().Flags&net.FlagUp)
	require.Equal(t, 1, seen.configuredAddrs)
	require.Equal(t, uint32(1500), seen.endpointMTU)
}
