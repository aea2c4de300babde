//go:build linux

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/internal/netns/netnstest"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// The TUN tests create namespace K, create the TUN device inside it (the
// kernel's end, with the kernel's addresses) and put ustack on the
// endpoint: the kernel in K talks to ustack through the device. Go's own
// net sockets, opened inside K, stand for the kernel's applications.
// Addresses come from the benchmarking range (RFC 2544) and the
// unique-local range, and exist only in K and in ustack.
const tunDev = "ustun0"

var (
	tunKernel4 = netip.MustParsePrefix("198.18.20.1/24")
	tunUstack4 = netip.MustParsePrefix("198.18.20.2/24")
	tunKernel6 = netip.MustParsePrefix("fd00:20::1/64")
	tunUstack6 = netip.MustParsePrefix("fd00:20::2/64")
)

// tunPrivilege names what tunProbe needs, for needPrivilege.
const tunPrivilege = "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to build network namespaces and open /dev/net/tun in them"

// tunProbe checks once, by doing it, whether this process may build a
// namespace and create a TUN device in it. Like netns.Probe, its error
// tells a missing privilege (netns.NoPrivilege) from a missing or broken
// /dev/net/tun, which is no reason to skip.
var tunProbe = sync.OnceValue(func() error {
	if err := nsProbe(); err != nil {
		return err
	}
	ns, err := netns.New("ustack-tunprobe")
	if err != nil {
		return err
	}
	err = ns.Do(func() error {
		ep, err := tun.Open("probe0", &tun.Options{NoUp: true})
		if err != nil {
			return err
		}
		ep.Close()
		return nil
	})
	return errors.Join(err, ns.Close())
})

func tunRequirePrivilege(tb testing.TB) {
	tb.Helper()
	needPrivilege(tb, tunPrivilege, tunProbe())
}

// tunNet is one test topology: the kernel in K, ustack on K's TUN device.
type tunNet struct {
	k   *netns.NS
	s   *stack.Stack
	ep  *tun.Endpoint
	nic tcpip.NICID
}

// newTunNet builds the topology with the endpoint options and qdisc given
// (the kernel's addresses are added to opts), and tears it all down when
// the test ends.
func newTunNet(tb testing.TB, opts *tun.Options, qdisc string) *tunNet {
	tb.Helper()
	tunRequirePrivilege(tb)
	k := netnstest.New(tb, "ustack-tun")
	var o tun.Options
	if opts != nil {
		o = *opts
	}
	o.Addrs = []netip.Prefix{tunKernel4, tunKernel6}
	var ep *tun.Endpoint
	require.NoError(tb, k.Do(func() (err error) {
		ep, err = tun.Open(tunDev, &o)
		return err
	}))
	s, err := stack.New(nil)
	if err != nil {
		ep.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	id, err := s.AddNIC(ep, &stack.NICOptions{Name: "tun", Qdisc: qdisc})
	if err != nil {
		ep.Close()
		tb.Fatal(err)
	}
	require.NoError(tb, s.AddAddress(id, tunUstack4))
	require.NoError(tb, s.AddAddress(id, tunUstack6))
	return &tunNet{k: k, s: s, ep: ep, nic: id}
}

// connect returns a connected pair of TCP conns, the kernel's in K and
// ustack's, to the kernel address kaddr (ustack dials) or to ustack's
// uaddr (the kernel dials).
func (n *tunNet) connect(tb testing.TB, kaddr, uaddr netip.Addr, port uint16, ustackDials bool) (kc, uc net.Conn) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ustackDials {
		var ln net.Listener
		require.NoError(tb, n.k.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(kaddr, port).String())
			return err
		}))
		defer ln.Close()
		uc, err := n.s.DialTCP(ctx, netip.AddrPortFrom(kaddr, port))
		require.NoError(tb, err)
		kc, err := ln.Accept()
		require.NoError(tb, err)
		return kc, uc
	}
	ln, err := n.s.ListenTCP(netip.AddrPortFrom(uaddr, port))
	require.NoError(tb, err)
	defer ln.Close()
	require.NoError(tb, n.k.Do(func() (err error) {
		var d net.Dialer
		kc, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(uaddr, port).String())
		return err
	}))
	uc, err = ln.Accept()
	require.NoError(tb, err)
	return kc, uc
}

// transfer connects the kernel and ustack over kaddr's IP version and
// exchanges size bytes each way, logging the rate.
func (n *tunNet) transfer(tb testing.TB, kaddr, uaddr netip.Addr, port uint16, ustackDials bool, size int64) {
	tb.Helper()
	kc, uc := n.connect(tb, kaddr, uaddr, port, ustackDials)
	defer kc.Close()
	defer uc.Close()
	d, err := xfer.Exchange(kc, uc, size, xfer.Timeout(size))
	require.NoError(tb, err)
	tb.Logf("%d MiB each way in %v: %.2f Gbit/s each way", size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e9)
}

// tunCheckClean checks that the endpoint dropped nothing as malformed, bad
// or failed, and logs its counters.
func tunCheckClean(tb testing.TB, ep *tun.Endpoint) {
	tb.Helper()
	st := ep.LinkStats()
	ofs := ep.OffloadStats()
	tb.Logf("offloads %v; tx %d pkts (%d super) in %d calls, %.0f B/pkt; rx %d pkts (%d super, %d USO split) in %d rounds, %.0f B/pkt",
		ep.Offloads(), st.TXPackets, ofs.TXSuperSegments, st.TXCalls, float64(st.TXBytes)/float64(max(st.TXPackets, 1)),
		st.RXPackets, ofs.RXSuperSegments, ofs.RXUSOSplit, st.RXRounds, float64(st.RXBytes)/float64(max(st.RXPackets, 1)))
	require.Zero(tb, st.TXErrors, "TX errors")
	require.Zero(tb, st.RXErrors, "RX errors")
	require.Zero(tb, st.RXBadChecksum, "RX bad checksums")
	require.Zero(tb, st.RXMalformed, "RX malformed")
	require.NoError(tb, ep.Err())
}

// TestTunEveryQdisc runs, for every queueing discipline and both IP
// versions, a TCP transfer of tunTransferSize each way at once between the
// kernel and ustack, and a UDP echo exchange. IPv4 connections are opened
// by ustack, IPv6 ones by the kernel. With TSO negotiated, the
// kernel->ustack half arrives as the kernel's super-segments, which
// gVisor takes whole.
func TestTunEveryQdisc(t *testing.T) {
	tunRequirePrivilege(t)
	for _, q := range sched.Names() {
		t.Run(q, func(t *testing.T) {
			n := newTunNet(t, nil, q)
			t.Run("ipv4", func(t *testing.T) {
				n.transfer(t, tunKernel4.Addr(), tunUstack4.Addr(), 5001, true, tunTransferSize)
				udpEchoFromUstack(t, n.k, n.s, tunKernel4.Addr())
			})
			t.Run("ipv6", func(t *testing.T) {
				n.transfer(t, tunKernel6.Addr(), tunUstack6.Addr(), 5002, false, tunTransferSize)
				udpEchoFromUstack(t, n.k, n.s, tunKernel6.Addr())
			})
			tunCheckClean(t, n.ep)
			st := n.ep.LinkStats()
			require.NotZero(t, st.TXPackets)
			require.NotZero(t, st.RXPackets)
			if n.ep.Offloads().TSO() {
				ofs := n.ep.OffloadStats()
				require.NotZero(t, ofs.RXSuperSegments, "the kernel's TSO/GRO super-segments reached ustack whole")
				require.NotZero(t, ofs.TXSuperSegments, "ustack wrote TSO super-segments")
			}
		})
	}
}

// TestTunOffloads runs a transfer each way with the virtio-net header and
// its offloads, without them, and without them but with gVisor's software
// GSO, and checks what each negotiated and did.
func TestTunOffloads(t *testing.T) {
	tunRequirePrivilege(t)
	for _, tc := range []struct {
		name string
		opts tun.Options
	}{
		{"offload", tun.Options{}},
		{"no-offload", tun.Options{NoOffload: true}},
		{"no-offload-no-swgso", tun.Options{NoOffload: true, NoSoftwareGSO: true}},
		{"no-offload-no-gro", tun.Options{NoOffload: true, NoGRO: true}},
		{"offload-mtu-65520", tun.Options{MTU: tun.MaxMTU}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTunNet(t, &tc.opts, sched.LList)
			off := n.ep.Offloads()
			t.Logf("negotiated: %v", off)
			require.Equal(t, !tc.opts.NoOffload, off.VNetHeader)
			if !tc.opts.NoOffload {
				require.True(t, off.Checksum && off.TSO(), "every kernel ustack supports negotiates TSO: %v", off)
			}
			n.transfer(t, tunKernel4.Addr(), tunUstack4.Addr(), 5001, true, tunSmallSize)
			n.transfer(t, tunKernel6.Addr(), tunUstack6.Addr(), 5002, false, tunSmallSize)
			udpEchoFromUstack(t, n.k, n.s, tunKernel4.Addr())
			tunCheckClean(t, n.ep)
			ofs := n.ep.OffloadStats()
			st := n.ep.LinkStats()
			switch {
			case off.TSO() && n.ep.MTU() >= tun.HostGSOMaxSize/2:
				// Segments of almost 64 KiB fit the MTU itself: nothing
				// needs segmenting, but packets are large all the same.
				require.Greater(t, st.TXBytes/st.TXPackets, uint64(4096))
				require.Greater(t, st.RXBytes/st.RXPackets, uint64(4096))
			case off.TSO():
				require.NotZero(t, ofs.TXSuperSegments)
				require.NotZero(t, ofs.RXSuperSegments)
			default:
				require.Zero(t, ofs.TXSuperSegments)
				require.Zero(t, ofs.RXSuperSegments)
				require.LessOrEqual(t, st.RXBytes/st.RXPackets, uint64(n.ep.MTU()), "without offloads no packet exceeds the MTU")
			}
		})
	}
}

// TestTunUSO has the kernel send UDP with UDP_SEGMENT (one send, many
// datagrams): with USO negotiated the device hands ustack the
// super-packet and the endpoint splits it; without, the kernel splits.
// Either way ustack must receive the datagrams one by one. Then the
// endpoint's coalescing is turned off, as a stack that routes does, and
// with it the kernel's offloads: the kernel splits, and ustack receives
// the same datagrams.
func TestTunUSO(t *testing.T) {
	n := newTunNet(t, nil, sched.None)
	t.Logf("negotiated: %v", n.ep.Offloads())
	off := n.ep.Offloads()
	for _, coalescing := range []bool{true, false} {
		n.ep.SetCoalescing(coalescing)
		for _, tc := range []struct {
			name         string
			kaddr, uaddr netip.Addr
		}{{"ipv4", tunKernel4.Addr(), tunUstack4.Addr()}, {"ipv6", tunKernel6.Addr(), tunUstack6.Addr()}} {
			t.Run(fmt.Sprintf("%s/coalescing=%v", tc.name, coalescing), func(t *testing.T) {
				split, datagrams := tunSendUSO(t, n, tc.kaddr, tc.uaddr)
				t.Logf("USO super-packets split: %d, into %d datagrams", split, datagrams)
				switch {
				case !coalescing:
					require.Zero(t, split, "without offloads the kernel splits")
				case off.USO4 && off.USO6:
					require.Equal(t, uint64(1), split, "the kernel handed over one super-packet")
					require.Equal(t, uint64(tunUSOCount), datagrams)
				}
			})
		}
	}
	tunCheckClean(t, n.ep)
}

const tunUSOSeg, tunUSOCount = 1000, 20

// tunSendUSO sends one UDP_SEGMENT write of tunUSOCount datagrams from the
// kernel's kaddr to ustack's uaddr, checks that ustack receives them one
// by one, intact, and returns how many super-packets the endpoint split
// meanwhile, into how many datagrams.
func tunSendUSO(t *testing.T, n *tunNet, kaddr, uaddr netip.Addr) (split, datagrams uint64) {
	t.Helper()
	const seg, count = tunUSOSeg, tunUSOCount
	pc, err := n.s.ListenUDP(netip.AddrPortFrom(uaddr, 9000))
	require.NoError(t, err)
	defer pc.Close()
	before := n.ep.OffloadStats()
	var kc *net.UDPConn
	require.NoError(t, n.k.Do(func() error {
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(kaddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(uaddr, 9000)))
		kc = c
		return err
	}))
	defer kc.Close()
	rc, err := kc.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, seg)
	}))
	if serr != nil {
		skip(t, "the kernel refuses UDP_SEGMENT (Linux 4.18+) on the sending socket: %v", serr)
	}
	msg := make([]byte, seg*count-seg/2) // the last datagram is half size
	for i := range msg {
		msg[i] = byte(i / seg)
	}
	_, err = kc.Write(msg)
	require.NoError(t, err)
	buf := make([]byte, 65536)
	var got []byte
	for i := range count {
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(5*time.Second)))
		m, _, err := pc.ReadFrom(buf)
		require.NoError(t, err, "datagram %d", i)
		want := seg
		if i == count-1 {
			want = seg / 2
		}
		require.Equal(t, want, m, "datagram %d arrives on its own", i)
		got = append(got, buf[:m]...)
	}
	require.Equal(t, msg, got)
	// The endpoint counts a super-packet before delivering any of its
	// datagrams, so the count is final here.
	after := n.ep.OffloadStats()
	return after.RXUSOSplit - before.RXUSOSplit, after.RXUSODatagrams - before.RXUSODatagrams
}

// TestTunMultiQueue opens the device with four queues and runs several
// connections at once: every one must arrive intact, and the traffic must
// use more than one queue in each direction.
func TestTunMultiQueue(t *testing.T) {
	const queues, conns = 4, 8
	n := newTunNet(t, &tun.Options{Queues: queues}, sched.LList)
	require.Equal(t, queues, n.ep.Queues())
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i := range conns {
		kaddr, uaddr := tunKernel4.Addr(), tunUstack4.Addr()
		if i%2 == 1 {
			kaddr, uaddr = tunKernel6.Addr(), tunUstack6.Addr()
		}
		kc, uc := n.connect(t, kaddr, uaddr, uint16(6000+i), i%4 < 2)
		defer kc.Close()
		defer uc.Close()
		wg.Go(func() {
			_, errs[i] = xfer.Exchange(kc, uc, tunSmallSize/4, xfer.Timeout(tunSmallSize))
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	tunCheckClean(t, n.ep)
	rxQueues, txQueues := 0, 0
	for i, s := range n.ep.QueueStats() {
		t.Logf("queue %d: tx %d pkts, rx %d pkts", i, s.TXPackets, s.RXPackets)
		if s.RXPackets > 0 {
			rxQueues++
		}
		if s.TXPackets > 0 {
			txQueues++
		}
	}
	require.Greater(t, txQueues, 1, "ustack spread its flows over the queues")
	require.Greater(t, rxQueues, 1, "the kernel spread its flows over the queues")
}

// TestTunDeviceDeleted deletes the device in K while TCP runs both ways:
// the endpoint must notice (Err), fail writes instead of hanging, and the
// stack must close with every goroutine gone.
func TestTunDeviceDeleted(t *testing.T) {
	tunRequirePrivilege(t)
	for _, q := range []string{sched.None, sched.LList} {
		t.Run(q, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			k := netnstest.New(t, "ustack-tundel")
			var ep *tun.Endpoint
			require.NoError(t, k.Do(func() (err error) {
				ep, err = tun.Open(tunDev, &tun.Options{Addrs: []netip.Prefix{tunKernel4, tunKernel6}, Queues: 2})
				return err
			}))
			s, err := stack.New(nil)
			if err != nil {
				ep.Close()
				t.Fatal(err)
			}
			defer s.Close() // idempotent: the test closes it, this is for failures
			id, err := s.AddNIC(ep, &stack.NICOptions{Qdisc: q})
			if err != nil {
				ep.Close()
				t.Fatal(err)
			}
			require.NoError(t, s.AddAddress(id, tunUstack4))
			n := &tunNet{k: k, s: s, ep: ep, nic: id}
			kc, uc := n.connect(t, tunKernel4.Addr(), tunUstack4.Addr(), 5001, true)
			defer kc.Close()
			defer uc.Close()

			// Stream both ways until the device goes, then until the
			// deadline: the streams must end, one way or another.
			deadline := time.Now().Add(20 * time.Second)
			require.NoError(t, errors.Join(kc.SetDeadline(deadline), uc.SetDeadline(deadline)))
			var toKernel, toUstack atomic.Int64
			var wg sync.WaitGroup
			stream := func(w, r net.Conn, got *atomic.Int64) {
				wg.Go(func() { io.Copy(w, xfer.Pattern(3, -1)) })
				wg.Go(func() { io.Copy(tunCounter{got}, r) })
			}
			stream(uc, kc, &toKernel)
			stream(kc, uc, &toUstack)
			tunWaitFor(t, 10*time.Second, "8 MiB each way before the deletion", func() bool {
				return toKernel.Load() > 8<<20 && toUstack.Load() > 8<<20
			})

			require.NoError(t, k.DeleteLink(tunDev))
			tunWaitFor(t, 5*time.Second, "the endpoint to report the device gone", func() bool { return ep.Err() != nil })
			t.Logf("Err: %v", ep.Err())
			require.ErrorIs(t, ep.Err(), link.ErrDeviceGone)
			require.ErrorIs(t, ep.Err(), syscall.EBADFD)
			// TCP goes on retransmitting into the dead device: those
			// writes fail and are counted.
			tunWaitFor(t, 5*time.Second, "failed writes", func() bool { return ep.LinkStats().TXErrors > 0 })

			// Unblock the streams at once rather than at the deadline; a
			// stream stuck in the endpoint would not notice.
			kc.Close()
			uc.Close()
			ended := make(chan struct{})
			go func() { wg.Wait(); close(ended) }()
			select {
			case <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("streams did not end after the device was deleted")
			}
			closed := make(chan struct{})
			go func() { s.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Fatal("closing the stack hung after the device was deleted")
			}
			st := ep.LinkStats()
			t.Logf("link after deletion: tx %d pkts, %d errors; rx %d pkts, %d errors", st.TXPackets, st.TXErrors, st.RXPackets, st.RXErrors)
			require.NoError(t, k.Close())
			goleak.VerifyNone(t, ignore)
		})
	}
}

// tunCounter is an io.Writer that only counts.
type tunCounter struct{ n *atomic.Int64 }

func (c tunCounter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return len(b), nil
}

func tunWaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTunOpenErrors checks that Open explains what went wrong, and that
// closing a device Open created deletes it.
func TestTunOpenErrors(t *testing.T) {
	tunRequirePrivilege(t)
	k := netnstest.New(t, "ustack-tunerr")
	// Everything runs inside K; the assertions run outside Do, because a
	// failed require ends its goroutine, which must not be Do's.
	var r struct {
		first, busy, multi, veth, long, mtu error
		auto, mq                            *tun.Endpoint
		autoName                            string
		autoType                            string
		afterClose                          error
		mqLink                              netlink.Link
	}
	require.NoError(t, k.Do(func() error {
		first, err := tun.Open("ustbusy", nil)
		if err != nil {
			return err
		}
		defer first.Close()
		_, r.busy = tun.Open("ustbusy", nil)
		_, r.multi = tun.Open("ustbusy", &tun.Options{Queues: 2})

		la := netlink.NewLinkAttrs()
		la.Name = "ustveth0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "ustveth1"}); err != nil {
			return fmt.Errorf("create a veth pair: %w", err)
		}
		_, r.veth = tun.Open("ustveth0", nil)
		_, r.long = tun.Open("a-name-far-too-long", nil)
		_, r.mtu = tun.Open("ustbad", &tun.Options{MTU: 100})

		// An empty name lets the kernel pick one.
		if r.auto, err = tun.Open("", &tun.Options{NoUp: true}); err != nil {
			return err
		}
		r.autoName = r.auto.Name()
		l, err := netlink.LinkByName(r.autoName)
		if err != nil {
			return err
		}
		r.autoType = l.Type()
		r.auto.Close()
		_, r.afterClose = netlink.LinkByName(r.autoName)

		if r.mq, err = tun.Open("ustmq", &tun.Options{Queues: 2, MTU: 9000}); err != nil {
			return err
		}
		r.mqLink, err = netlink.LinkByName("ustmq")
		return err
	}))
	t.Logf("busy: %v", r.busy)
	require.ErrorIs(t, r.busy, syscall.EBUSY)
	require.ErrorContains(t, r.busy, "single-queue TUN device that is already open")
	t.Logf("multi: %v", r.multi)
	require.ErrorIs(t, r.multi, syscall.EINVAL)
	require.ErrorContains(t, r.multi, "is a single-queue device")
	t.Logf("veth: %v", r.veth)
	require.ErrorContains(t, r.veth, "taken by a veth device")
	require.ErrorContains(t, r.long, "longer than 15 bytes")
	require.ErrorContains(t, r.mtu, "MTU 100")

	require.NotEmpty(t, r.autoName)
	require.Equal(t, "tuntap", r.autoType)
	var nf netlink.LinkNotFoundError
	require.ErrorAs(t, r.afterClose, &nf, "closing the endpoint deletes the device it created")

	defer r.mq.Close()
	require.Equal(t, 2, r.mq.Queues())
	require.Equal(t, 9000, r.mqLink.Attrs().MTU)
	require.Equal(t, uint32(9000), r.mq.MTU())
	require.NotZero(t, r.mqLink.Attrs().Flags&net.FlagUp)
}

// tunBenchNet builds a topology for a benchmark, skipping without privilege.
func tunBenchNet(b *testing.B, opts *tun.Options) *tunNet {
	b.Helper()
	needPrivilege(b, tunPrivilege, tunProbe())
	return newTunNet(b, opts, sched.LList)
}

// BenchmarkTunTCP measures one TCP stream's throughput between the kernel
// and ustack over TUN, each direction, with the virtio-net offloads (TSO
// both ways), without them, and without them but with gVisor's software
// GSO. The rate is reported in Gbit/s; each op is one 1 MiB write.
func BenchmarkTunTCP(b *testing.B) {
	const chunk = 1 << 20
	for _, mode := range []struct {
		name string
		opts tun.Options
	}{
		{"offload", tun.Options{}},
		{"no-offload", tun.Options{NoOffload: true}},
		{"no-offload-no-swgso", tun.Options{NoOffload: true, NoSoftwareGSO: true}},
		{"no-offload-no-gro", tun.Options{NoOffload: true, NoGRO: true}},
	} {
		for _, dir := range []string{"ustack-to-kernel", "kernel-to-ustack"} {
			b.Run(mode.name+"/"+dir, func(b *testing.B) {
				n := tunBenchNet(b, &mode.opts)
				kc, uc := n.connect(b, tunKernel4.Addr(), tunUstack4.Addr(), 5001, true)
				defer kc.Close()
				defer uc.Close()
				w, r := uc, kc
				if dir == "kernel-to-ustack" {
					w, r = kc, uc
				}
				var got atomic.Int64
				done := make(chan error, 1)
				go func() {
					_, err := io.Copy(tunCounter{&got}, r)
					done <- err
				}()
				buf := make([]byte, chunk)
				xfer.Pattern(9, chunk).Read(buf)
				b.SetBytes(chunk)
				var start time.Time
				for b.Loop() {
					if start.IsZero() {
						start = time.Now()
					}
					if _, err := w.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				want := int64(b.N) * chunk
				for got.Load() < want {
					select {
					case err := <-done:
						b.Fatalf("receiver stopped after %d of %d bytes: %v", got.Load(), want, err)
					case <-time.After(time.Millisecond):
					}
				}
				el := time.Since(start)
				b.ReportMetric(float64(want)*8/el.Seconds()/1e9, "Gbit/s")
				st := n.ep.LinkStats()
				b.ReportMetric(float64(st.TXBytes)/float64(max(st.TXPackets, 1)), "txB/pkt")
				b.ReportMetric(float64(st.RXBytes)/float64(max(st.RXPackets, 1)), "rxB/pkt")
				w.Close()
				r.Close()
				<-done
			})
		}
	}
}
