//go:build linux

package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/netns/netnstest"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/stack"
)

// The OpenFD tests play both sides of a privileged helper: inside
// namespace K, "the helper" creates a TUN device with raw ioctls,
// configures it through netlink (as VpnService.Builder or a root helper
// would) and sends its descriptor over a unix socket with SCM_RIGHTS;
// outside K, "the app" receives it and adopts it with tun.OpenFD, which
// needs no namespace and no netlink, and puts a ustack stack on it.
const tunFDDev = "ustunfd0"

var (
	tunFDKernel4 = netip.MustParsePrefix("198.18.22.1/24")
	tunFDUstack4 = netip.MustParsePrefix("198.18.22.2/24")
	tunFDKernel6 = netip.MustParsePrefix("fd00:22::1/64")
	tunFDUstack6 = netip.MustParsePrefix("fd00:22::2/64")
)

// tunFDMTU is the MTU the helper sets and the app passes to OpenFD; not
// 1500, so that a default could not pass for it.
const tunFDMTU = 1400

// helperSend creates the device with flags in k, configures it, and sends
// its descriptor over sock; the helper's own copy is closed on return, so
// the app's received one is the device's only descriptor.
func helperSend(tb testing.TB, k *netns.NS, flags uint16, sock int) {
	tb.Helper()
	require.NoError(tb, k.Do(func() error {
		// Blocking, as a helper that knows nothing of Go's poller opens it.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("helper: open /dev/net/tun: %w", err)
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(tunFDDev)
		if err != nil {
			return err
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("helper: TUNSETIFF %#x: %w", flags, err)
		}
		l, err := netlink.LinkByName(tunFDDev)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, tunFDMTU); err != nil {
			return err
		}
		for _, p := range []netip.Prefix{tunFDKernel4, tunFDKernel6} {
			a, err := netlink.ParseAddr(p.String())
			if err != nil {
				return err
			}
			a.Flags |= unix.IFA_F_NODAD
			if err := netlink.AddrAdd(l, a); err != nil {
				return fmt.Errorf("helper: add %v: %w", p, err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return unix.Sendmsg(sock, []byte("tun"), unix.UnixRights(fd), nil, 0)
	}))
}

// appReceive receives one descriptor over sock.
func appReceive(tb testing.TB, sock int) int {
	tb.Helper()
	buf, oob := make([]byte, 16), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	require.NoError(tb, err)
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	require.NoError(tb, err)
	require.Len(tb, msgs, 1)
	fds, err := unix.ParseUnixRights(&msgs[0])
	require.NoError(tb, err)
	require.Len(tb, fds, 1)
	return fds[0]
}

// passTunFD plays both sides once: the helper creates a device with
// flags in a new namespace K and sends its descriptor over a socket pair,
// and the app receives it. The descriptor is the caller's; K and the
// socket pair are closed when the test ends.
func passTunFD(t *testing.T, flags uint16) (*netns.NS, int) {
	t.Helper()
	k := netnstest.New(t, "ustack-tunfd")
	socks, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(socks[0]); unix.Close(socks[1]) })
	helperSend(t, k, flags, socks[0])
	return k, appReceive(t, socks[1])
}

// TestTunOpenFD adopts, over SCM_RIGHTS, TUN descriptors with and without
// the virtio-net header (and one queue of a multi-queue device), checks
// that OpenFD found what the helper set, and moves traffic through ustack
// to the kernel: ping, a UDP echo exchange of every size, and, with the
// header, TCP both ways with the offloads. Closing the stack closes the
// descriptor, the device's last: the device goes.
func TestTunOpenFD(t *testing.T) {
	tunRequirePrivilege(t)
	const plain = unix.IFF_TUN | unix.IFF_NO_PI
	for _, tc := range []struct {
		name  string
		flags uint16
	}{
		{"plain", plain},
		{"vnet", plain | unix.IFF_VNET_HDR},
		{"vnet-multiqueue", plain | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, fd := passTunFD(t, tc.flags)
			ep, err := tun.OpenFD(fd, &tun.Options{MTU: tunFDMTU})
			if err != nil {
				unix.Close(fd) // still ours on error
				t.Fatal(err)
			}
			vnetHdr := tc.flags&unix.IFF_VNET_HDR != 0
			off := ep.Offloads()
			t.Logf("adopted %s: offloads %v", ep.Name(), off)
			require.Equal(t, tunFDDev, ep.Name())
			require.Equal(t, uint32(tunFDMTU), ep.MTU())
			require.Equal(t, tc.flags&unix.IFF_MULTI_QUEUE != 0, ep.MultiQueue())
			require.Equal(t, vnetHdr, off.VNetHeader, "the header exactly when the descriptor has it")
			require.False(t, off.Inherited, "root may set the offloads")
			if vnetHdr {
				require.True(t, off.Checksum && off.TSO(), "every kernel ustack supports negotiates TSO: %v", off)
			} else {
				require.Equal(t, tun.Offloads{}, off)
			}

			s, err := stack.New(nil)
			if err != nil {
				ep.Close()
				t.Fatal(err)
			}
			defer s.Close()
			nic, err := s.AddNIC(ep, &stack.NICOptions{Name: "tunfd"})
			if err != nil {
				ep.Close()
				t.Fatal(err)
			}
			require.NoError(t, s.AddAddress(nic, tunFDUstack4))
			require.NoError(t, s.AddAddress(nic, tunFDUstack6))

			reachable(t, s, "adopted", tunFDKernel4.Addr(), tunFDKernel6.Addr())
			udpEchoFromUstack(t, k, s, tunFDKernel4.Addr())
			udpEchoFromUstack(t, k, s, tunFDKernel6.Addr())
			if vnetHdr {
				n := &tunNet{k: k, s: s, ep: ep, nic: nic}
				n.transfer(t, tunFDKernel4.Addr(), tunFDUstack4.Addr(), 5001, true, tunSmallSize)
				n.transfer(t, tunFDKernel6.Addr(), tunFDUstack6.Addr(), 5002, false, tunSmallSize)
				ofs := ep.OffloadStats()
				require.NotZero(t, ofs.TXSuperSegments, "ustack wrote TSO super-segments to the adopted descriptor")
				require.NotZero(t, ofs.RXSuperSegments, "the kernel's super-segments reached ustack whole")
			}
			tunCheckClean(t, ep)

			require.NoError(t, s.Close())
			require.NoError(t, k.Do(func() error {
				_, err := netlink.LinkByName(tunFDDev)
				var nf netlink.LinkNotFoundError
				if !errors.As(err, &nf) {
					return fmt.Errorf("the device outlived its last descriptor: LinkByName: %v", err)
				}
				return nil
			}))
		})
	}
}

// TestTunOpenFDRefusesTAP: a descriptor of a TAP device, passed the same
// way, is refused, and stays the app's: open, and still the device's.
func TestTunOpenFDRefusesTAP(t *testing.T) {
	tunRequirePrivilege(t)
	_, fd := passTunFD(t, unix.IFF_TAP|unix.IFF_NO_PI)
	defer unix.Close(fd)
	_, err := tun.OpenFD(fd, nil)
	require.ErrorContains(t, err, fmt.Sprintf("tun fd %d: %s is a TAP device", fd, tunFDDev))
	ifr, err := unix.NewIfreq("")
	require.NoError(t, err)
	require.NoError(t, unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr), "the refused descriptor is still open and attached")
	require.Equal(t, tunFDDev, ifr.Name())
}
