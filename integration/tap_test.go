//go:build linux

package integration

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// The TAP tests put ustack on a TAP device in namespace K, as rootless
// container tools hand their network helper one: the kernel in K on one
// side, with the kernel's addresses and the device's own MAC, ustack's
// stack on the other, with a MAC of its own, both resolving the other
// with ARP and IPv6 neighbour discovery. The device is created three
// ways: by ustack (tun.Open), persistent beforehand by `ip tuntap add`
// and configured by ip, as RootlessKit leaves its tap0, then attached by
// name with NoConfigure; and by a helper in K (tun.Create) that passes
// its descriptor over SCM_RIGHTS to ustack outside, which adopts it
// (tun.OpenFD).
const tapDev = "ustap0"

var (
	tapKernel4 = netip.MustParsePrefix("198.18.24.1/24")
	tapUstack4 = netip.MustParsePrefix("198.18.24.2/24")
	tapKernel6 = netip.MustParsePrefix("fd00:24::1/64")
	tapUstack6 = netip.MustParsePrefix("fd00:24::2/64")
)

// tapOrigin is how a test's TAP device comes to be.
type tapOrigin int

const (
	tapCreated    tapOrigin = iota // tun.Open creates and configures it
	tapPersistent                  // ip tuntap add, ip configures it, tun.Open attaches with NoConfigure
	tapAdopted                     // tun.Create in K, the descriptor passed to tun.OpenFD outside
)

func (o tapOrigin) String() string {
	return [...]string{"created", "persistent", "adopted"}[o]
}

// ipIn runs ip with args in namespace k.
func ipIn(tb testing.TB, k *netns.NS, args ...string) {
	tb.Helper()
	out, err := exec.Command("ip", append([]string{"-n", k.Name}, args...)...).CombinedOutput()
	require.NoError(tb, err, "ip %s: %s", strings.Join(args, " "), out)
}

// tapPersist creates a persistent device of mode ("tap" or "tun") in k,
// as RootlessKit does for its tap0.
func tapPersist(tb testing.TB, k *netns.NS, name, mode string) {
	tb.Helper()
	needTool(tb, "ip", "iproute2")
	ipIn(tb, k, "tuntap", "add", "dev", name, "mode", mode)
}

// newTapNet builds namespace K, a TAP device in it made the origin's
// way with the endpoint options given (TAP is set, the kernel's
// addresses added where ustack configures), and ustack on it through
// its Ethernet endpoint; it tears it all down when the test ends.
func newTapNet(tb testing.TB, origin tapOrigin, opts tun.Options, qdisc string) *tunNet {
	tb.Helper()
	tunRequirePrivilege(tb)
	k, err := netns.New("ustack-tap")
	require.NoError(tb, err)
	tb.Cleanup(func() { k.Close() })
	opts.TAP = true
	var ep *tun.Endpoint
	switch origin {
	case tapCreated:
		opts.Addrs = []netip.Prefix{tapKernel4, tapKernel6}
		require.NoError(tb, k.Do(func() (err error) {
			ep, err = tun.Open(tapDev, &opts)
			return err
		}))
	case tapPersistent:
		tapPersist(tb, k, tapDev, "tap")
		ipIn(tb, k, "link", "set", "dev", tapDev, "mtu", "1500", "up")
		ipIn(tb, k, "addr", "add", tapKernel4.String(), "dev", tapDev)
		ipIn(tb, k, "addr", "add", tapKernel6.String(), "dev", tapDev, "nodad")
		opts.NoConfigure = true
		require.NoError(tb, k.Do(func() (err error) {
			ep, err = tun.Open(tapDev, &opts)
			return err
		}))
	case tapAdopted:
		socks, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		require.NoError(tb, err)
		defer unix.Close(socks[0])
		defer unix.Close(socks[1])
		// The helper: creates and configures the device in K, passes its
		// descriptor, and keeps none.
		require.NoError(tb, k.Do(func() error {
			d, err := tun.Create(tapDev, &tun.Options{TAP: true, NoOffload: opts.NoOffload, Addrs: []netip.Prefix{tapKernel4, tapKernel6}})
			if err != nil {
				return err
			}
			defer d.Close()
			return unix.Sendmsg(socks[0], []byte("tap"), unix.UnixRights(d.FDs[0]), nil, 0)
		}))
		fd := appReceive(tb, socks[1])
		ep, err = tun.OpenFD(fd, &opts)
		if err != nil {
			unix.Close(fd)
			tb.Fatal(err)
		}
	}
	s, err := stack.New(nil)
	if err != nil {
		ep.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	id, err := s.AddNIC(ep.Ethernet(), &stack.NICOptions{Name: "tap", Qdisc: qdisc})
	if err != nil {
		ep.Close()
		tb.Fatal(err)
	}
	require.NoError(tb, s.AddAddress(id, tapUstack4))
	require.NoError(tb, s.AddAddress(id, tapUstack6))
	return &tunNet{k: k, s: s, ep: ep, nic: id}
}

// kernelNeighbours returns the kernel's neighbour entries in K for
// ustack's addresses on the device: the MAC it resolved each to.
func kernelNeighbours(tb testing.TB, k *netns.NS) map[netip.Addr]string {
	tb.Helper()
	got := map[netip.Addr]string{}
	require.NoError(tb, k.Do(func() error {
		l, err := netlink.LinkByName(tapDev)
		if err != nil {
			return err
		}
		for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			ns, err := netlink.NeighList(l.Attrs().Index, family)
			if err != nil {
				return err
			}
			for _, n := range ns {
				a, ok := netip.AddrFromSlice(n.IP)
				if ok && n.HardwareAddr != nil {
					got[a.Unmap()] = n.HardwareAddr.String()
				}
			}
		}
		return nil
	}))
	return got
}

// kernelPing has the kernel in K send ICMP echo requests to dst until one
// is answered, for up to 10 s (the first may wait for neighbour
// resolution), with a raw ICMP socket opened in K.
func kernelPing(tb testing.TB, k *netns.NS, dst netip.Addr) {
	tb.Helper()
	network, proto := "ip4:icmp", 1
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, proto = "ip6:ipv6-icmp", 58
		typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var c *icmp.PacketConn
	require.NoError(tb, k.Do(func() (err error) {
		c, err = icmp.ListenPacket(network, "")
		return err
	}))
	defer c.Close()
	payload := []byte("ping from the kernel over tap")
	buf := make([]byte, 1500)
	deadline := time.Now().Add(10 * time.Second)
	for seq := 1; ; seq++ {
		req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: 0x7a9, Seq: seq, Data: payload}}).Marshal(nil)
		require.NoError(tb, err)
		_, err = c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()})
		require.NoError(tb, err)
		require.NoError(tb, c.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				break // timed out: send again
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != reply {
				continue // our own request (IPv6 raw sockets see them), or others'
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.Seq == seq && bytes.Equal(e.Data, payload) {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("kernel ping %v over the TAP device: no reply", dst)
		}
	}
}

// TestTapKernel carries traffic between the kernel and ustack over a TAP
// device made each way, with the offloads and without: ARP and neighbour
// discovery both ways (each side's neighbour entry holds the other's
// MAC), ICMP echo both ways, a checked TCP transfer each way over each IP
// version (ustack dials over IPv4, the kernel over IPv6) and a UDP echo
// exchange of every size, fragments included, and a UDP_SEGMENT send
// (USO, where negotiated).
func TestTapKernel(t *testing.T) {
	tunRequirePrivilege(t)
	for _, origin := range []tapOrigin{tapCreated, tapPersistent, tapAdopted} {
		for _, tc := range []struct {
			name string
			opts tun.Options
		}{{"offload", tun.Options{}}, {"no-offload", tun.Options{NoOffload: true}}} {
			t.Run(fmt.Sprintf("%v/%s", origin, tc.name), func(t *testing.T) {
				n := newTapNet(t, origin, tc.opts, sched.LList)
				off := n.ep.Offloads()
				t.Logf("negotiated: %v", off)
				require.True(t, n.ep.TAP())
				require.Equal(t, !tc.opts.NoOffload, off.VNetHeader)
				if !tc.opts.NoOffload {
					require.True(t, off.Checksum && off.TSO(), "a TAP device negotiates TSO as a TUN device does: %v", off)
				}
				mac := n.ep.Ethernet().LinkAddress()
				require.Len(t, mac, 6)

				reachable(t, n.s, "tap", tapKernel4.Addr(), tapKernel6.Addr())
				kernelPing(t, n.k, tapUstack4.Addr())
				kernelPing(t, n.k, tapUstack6.Addr())
				neigh := kernelNeighbours(t, n.k)
				require.Equal(t, mac.String(), neigh[tapUstack4.Addr()], "the kernel resolved ustack's IPv4 address with ARP")
				require.Equal(t, mac.String(), neigh[tapUstack6.Addr()], "the kernel resolved ustack's IPv6 address with neighbour discovery")

				n.transfer(t, tapKernel4.Addr(), tapUstack4.Addr(), 5021, true, tunSmallSize/4)
				n.transfer(t, tapKernel6.Addr(), tapUstack6.Addr(), 5022, false, tunSmallSize/4)
				udpEchoFromUstack(t, n.k, n.s, tapKernel4.Addr())
				udpEchoFromUstack(t, n.k, n.s, tapKernel6.Addr())
				// One UDP_SEGMENT send: with USO negotiated the kernel hands
				// over one super-packet, split here behind its Ethernet
				// header; without, the kernel splits.
				split, datagrams := tunSendUSO(t, n, tapKernel6.Addr(), tapUstack6.Addr())
				if off.USO4 && off.USO6 {
					require.Equal(t, uint64(1), split, "the kernel handed over one super-packet")
					require.Equal(t, uint64(tunUSOCount), datagrams)
				} else {
					require.Zero(t, split)
				}
				tunCheckClean(t, n.ep)
				if off.TSO() {
					ofs := n.ep.OffloadStats()
					require.NotZero(t, ofs.TXSuperSegments, "ustack wrote TSO super-segments behind their Ethernet header")
					require.NotZero(t, ofs.RXSuperSegments, "the kernel's TSO super-segments reached ustack whole")
				} else {
					st := n.ep.LinkStats()
					require.LessOrEqual(t, st.RXBytes/st.RXPackets, uint64(n.ep.MTU()), "without offloads no frame exceeds the MTU")
				}
			})
		}
	}
}

// TestTapWrongType: a persistent device of the other type, as another
// tool left it, is refused with an error that names its type and what to
// do, not a capability complaint; asked for as what it is, the same
// device is attached.
func TestTapWrongType(t *testing.T) {
	tunRequirePrivilege(t)
	k, err := netns.New("ustack-tapwrong")
	require.NoError(t, err)
	defer k.Close()
	tapPersist(t, k, "tap0", "tap")
	tapPersist(t, k, "tun0", "tun")
	var asTUN, asTAP, rightTAP, rightTUN error
	require.NoError(t, k.Do(func() error {
		_, asTUN = tun.Open("tap0", &tun.Options{NoConfigure: true})
		_, asTAP = tun.Open("tun0", &tun.Options{TAP: true, NoConfigure: true})
		for _, c := range []struct {
			name string
			tap  bool
			err  *error
		}{{"tap0", true, &rightTAP}, {"tun0", false, &rightTUN}} {
			ep, err := tun.Open(c.name, &tun.Options{TAP: c.tap, NoConfigure: true})
			if *c.err = err; err == nil {
				ep.Close()
			}
		}
		return nil
	}))
	require.ErrorIs(t, asTUN, unix.EINVAL)
	require.ErrorContains(t, asTUN, "tun tap0: ioctl TUNSETIFF: invalid argument: tap0 is a TAP device, not TUN: open it with Options.TAP, or pick another name")
	require.NotContains(t, asTUN.Error(), "CAP_NET_ADMIN")
	require.ErrorContains(t, asTAP, "tun0 is a TUN device, not TAP: open it without Options.TAP")
	require.NotContains(t, asTAP.Error(), "CAP_NET_ADMIN")
	require.NoError(t, rightTAP)
	require.NoError(t, rightTUN)
}
