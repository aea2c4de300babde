//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// OpenFD against the kernel (real TUN descriptors, with and without
// IFF_VNET_HDR, passed over SCM_RIGHTS) is tested in integration/. Here a
// socketpair stands in for an adopted descriptor: the kernel's TUNGETIFF
// refuses it, which is the refusal tested first; then fake ioctls
// (openFD's seam) report it as a TUN device, so that everything after the
// detection runs over it.

// blockingPair returns a SOCK_SEQPACKET socketpair, both ends blocking as
// a descriptor handed over by another process may be. The peer is closed
// when the test ends; near is the caller's (see closeAtEnd).
func blockingPair(t *testing.T) (near, peer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	require.NoError(t, err)
	require.NoError(t, unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}))
	t.Cleanup(func() { unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// closeAtEnd closes fd when the test ends: for a descriptor OpenFD
// refused, which is still the test's. One the endpoint took is closed by
// its Close alone; closing its number again could close whatever reused it.
func closeAtEnd(t *testing.T, fd int) { t.Cleanup(func() { unix.Close(fd) }) }

// requireUntouched checks that fd is open, still blocking and still
// without close-on-exec: OpenFD's refusal left it as it was.
func requireUntouched(t *testing.T, fd int) {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	require.NoError(t, err, "fd %d must still be open", fd)
	require.Zero(t, fl&unix.O_NONBLOCK, "fd %d must still be blocking", fd)
	fdfl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.Zero(t, fdfl&unix.FD_CLOEXEC, "fd %d must not have become close-on-exec", fd)
}

func TestTunOpenFDRefusesNonTUN(t *testing.T) {
	near, peer := blockingPair(t)
	closeAtEnd(t, near)
	_, err := OpenFD(near, nil)
	require.ErrorIs(t, err, unix.ENOTTY, "TUNGETIFF on a socket")
	require.ErrorContains(t, err, fmt.Sprintf("tun fd %d: ioctl TUNGETIFF", near))
	require.ErrorContains(t, err, "not a TUN device: expected a descriptor of /dev/net/tun")
	requireUntouched(t, near)
	// Still a working socket, the caller's.
	_, err = unix.Write(near, []byte("still mine"))
	require.NoError(t, err)
	b := make([]byte, 64)
	n, err := unix.Read(peer, b)
	require.NoError(t, err)
	require.Equal(t, "still mine", string(b[:n]))

	f, err := os.Create(filepath.Join(t.TempDir(), "not-a-tun"))
	require.NoError(t, err)
	defer f.Close()
	raw, err := f.SyscallConn()
	require.NoError(t, err)
	require.NoError(t, raw.Control(func(fd uintptr) {
		_, err = OpenFD(int(fd), nil)
	}))
	require.ErrorIs(t, err, unix.ENOTTY, "TUNGETIFF on a regular file")
	require.ErrorContains(t, err, "not a TUN device")
	_, err = f.WriteString("still open")
	require.NoError(t, err)
}

// TestTunOpenFDRefusesUnattached: a descriptor of /dev/net/tun that no
// TUNSETIFF attached to a device is refused as such (EBADFD). Opening the
// clone device needs no privilege where its node is 0666, as usual.
func TestTunOpenFDRefusesUnattached(t *testing.T) {
	fd, err := unix.Open(cloneDevice, unix.O_RDWR, 0)
	if err != nil {
		testenv.Skip(t, "open %s: %v: the test needs the clone device readable and writable by this user", cloneDevice, err)
	}
	defer unix.Close(fd)
	_, err = OpenFD(fd, nil)
	require.ErrorIs(t, err, unix.EBADFD)
	require.ErrorContains(t, err, "attached to no device")
	requireUntouched(t, fd)
}

func TestTunOpenFDRefusesOptions(t *testing.T) {
	near, _ := blockingPair(t)
	closeAtEnd(t, near)
	_, err := OpenFD(near, &Options{Queues: 2})
	require.ErrorContains(t, err, "2 queues: OpenFD adopts one descriptor")
	_, err = OpenFD(near, &Options{MTU: 100})
	require.ErrorContains(t, err, fmt.Sprintf("tun fd %d: tun: MTU 100", near))
	_, err = OpenFD(-1, nil)
	require.ErrorContains(t, err, "fd -1: not a file descriptor")
	requireUntouched(t, near)
}

// fakeTUN is a set of ioctls that report the descriptor as the device dev
// with a virtio-net header of hdrSize bytes, and take offloads as offload
// says; it records the header size and offloads set.
type fakeTUN struct {
	dev     devInfo
	hdrSize int
	offload func(flags uint) error
	setSize error // what TUNSETVNETHDRSZ returns
	offered []uint
}

func (f *fakeTUN) ioctls() ioctls {
	return ioctls{
		getIff:      func(int) (devInfo, error) { return f.dev, nil },
		vnetHdrSize: func(int) (int, error) { return f.hdrSize, nil },
		setVnetHdrSize: func(_, size int) error {
			if f.setSize != nil {
				return f.setSize
			}
			f.hdrSize = size
			return nil
		},
		setOffload: func(_ int, flags uint) error {
			f.offered = append(f.offered, flags)
			return f.offload(flags)
		},
	}
}

// noUSO is a kernel before 6.2: it refuses the USO flags.
func noUSO(flags uint) error {
	if flags&(tunFUSO4|tunFUSO6) != 0 {
		return unix.EINVAL
	}
	return nil
}

// adopt runs openFD over a blocking socketpair with the fake ioctls, and
// returns the endpoint (closed when the test ends) and the peer.
func adopt(t *testing.T, f *fakeTUN, o *Options) (*Endpoint, int, int) {
	t.Helper()
	near, peer := blockingPair(t)
	e, err := openFD(f.ioctls(), near, o)
	if err != nil {
		unix.Close(near)
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, near, peer
}

const tunPlain = unix.IFF_TUN | unix.IFF_NO_PI

func TestTunOpenFDMovesPackets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags uint16
		want  Offloads
	}{
		{"plain", tunPlain, Offloads{}},
		{"vnet", tunPlain | unix.IFF_VNET_HDR, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTUN{dev: devInfo{name: "adopted0", flags: tc.flags}, hdrSize: vnet.HeaderSize, offload: noUSO}
			e, near, peer := adopt(t, f, &Options{MTU: 1400})
			require.Equal(t, "adopted0", e.Name())
			require.Equal(t, 1, e.Queues())
			require.False(t, e.MultiQueue())
			require.Equal(t, uint32(1400), e.MTU())
			require.Equal(t, tc.want, e.Offloads())
			fl, err := unix.FcntlInt(uintptr(near), unix.F_GETFL, 0)
			require.NoError(t, err)
			require.NotZero(t, fl&unix.O_NONBLOCK, "the adopted descriptor is made non-blocking for the runtime poller")
			fdfl, err := unix.FcntlInt(uintptr(near), unix.F_GETFD, 0)
			require.NoError(t, err)
			require.NotZero(t, fdfl&unix.FD_CLOEXEC)

			// In: the "kernel" writes, the stack receives.
			r := linktest.NewSink()
			e.Attach(r)
			in := tcp4Packet([]byte("from the kernel"), 7)
			wire := in
			if tc.want.VNetHeader {
				wire = frame(vnet.Header{Flags: vnet.FlagDataValid}, in)
			}
			_, err = unix.Write(peer, wire)
			require.NoError(t, err)
			got := r.Wait(t, 1)
			require.Equal(t, in, got[0].Data)

			// Out: the stack writes, the "kernel" reads.
			pkt := outPacket(9, []byte("from ustack"), false)
			defer pkt.DecRef()
			n, terr := e.WritePackets(list(pkt))
			require.Nil(t, terr)
			require.Equal(t, 1, n)
			out := readPeer(t, peer)
			if tc.want.VNetHeader {
				require.Equal(t, make([]byte, vnet.HeaderSize), out[:vnet.HeaderSize])
				out = out[vnet.HeaderSize:]
			}
			require.Equal(t, flat(pkt), out)

			// Close closes the adopted descriptor: the peer reads end of file.
			e.Close()
			b := make([]byte, 16)
			m, err := unix.Read(peer, b)
			require.NoError(t, err)
			require.Zero(t, m, "the peer sees the endpoint's end closed")
		})
	}
}

func TestTunOpenFDNegotiates(t *testing.T) {
	vnetMQ := devInfo{name: "mq0", flags: tunPlain | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE}

	// A header of another size is set to ours; USO is tried first, then
	// the offloads the kernel takes.
	f := &fakeTUN{dev: vnetMQ, hdrSize: 12, offload: noUSO}
	e, _, _ := adopt(t, f, nil)
	require.Equal(t, vnet.HeaderSize, f.hdrSize)
	require.Equal(t, offloadTries[:2], f.offered)
	require.True(t, e.MultiQueue())
	require.Equal(t, stack.HostGSOSupported, e.SupportedGSO())

	// NoOffload keeps the header the descriptor has and turns every
	// offload off.
	f = &fakeTUN{dev: vnetMQ, hdrSize: vnet.HeaderSize, offload: noUSO}
	e, _, _ = adopt(t, f, &Options{NoOffload: true})
	require.Equal(t, []uint{0}, f.offered)
	require.Equal(t, Offloads{VNetHeader: true}, e.Offloads())

	// A policy that refuses TUNSETOFFLOAD: the creator's offloads stay,
	// the endpoint claims no host GSO, and receive still takes a super-segment.
	f = &fakeTUN{dev: vnetMQ, hdrSize: vnet.HeaderSize, offload: func(uint) error { return unix.EACCES }}
	e, _, _ = adopt(t, f, nil)
	require.Equal(t, Offloads{VNetHeader: true, Inherited: true}, e.Offloads())
	require.Equal(t, "vnet,inherited", e.Offloads().String())
	require.Equal(t, stack.GVisorGSOSupported, e.SupportedGSO(), "no host GSO: gVisor's own")
	r := linktest.NewSink()
	e.AttachAndStart(r, func() {}) // receive by hand
	tso := tcp4Packet(make([]byte, 5000), 2)
	receiveOne(e.queues[0], frame(vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1000, HdrLen: 40, CsumStart: 20, CsumOffset: 16}, tso))
	require.Len(t, r.Packets(), 1)
	require.Equal(t, uint64(1), e.OffloadStats().RXSuperSegments)
}

// TestTunSetCoalescingOffloads: a stack that routes turns coalescing off,
// and with it the kernel's offloads, so that the kernel hands over
// packets as they would cross a wire; turning it on asks for what Open
// negotiated again. A device without offloads, or with inherited ones,
// is left alone.
func TestTunSetCoalescingOffloads(t *testing.T) {
	vnetDev := devInfo{name: "fwd0", flags: tunPlain | unix.IFF_VNET_HDR}
	f := &fakeTUN{dev: vnetDev, hdrSize: vnet.HeaderSize, offload: noUSO}
	e, _, _ := adopt(t, f, nil)
	negotiated := offloadTries[1]
	require.Equal(t, negotiated, f.offered[len(f.offered)-1])
	e.SetCoalescing(false)
	require.Equal(t, uint(0), f.offered[len(f.offered)-1], "no offloads for a router")
	e.SetCoalescing(true)
	require.Equal(t, negotiated, f.offered[len(f.offered)-1], "the negotiated offloads again")
	require.Equal(t, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true}, e.Offloads(), "Offloads reports what Open negotiated")

	for _, tc := range []struct {
		name string
		f    *fakeTUN
		o    *Options
	}{
		{"no offload", &fakeTUN{dev: vnetDev, hdrSize: vnet.HeaderSize, offload: noUSO}, &Options{NoOffload: true}},
		{"inherited", &fakeTUN{dev: vnetDev, hdrSize: vnet.HeaderSize, offload: func(uint) error { return unix.EPERM }}, nil},
		{"no header", &fakeTUN{dev: devInfo{name: "fwd1", flags: tunPlain}, offload: noUSO}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _, _ := adopt(t, tc.f, tc.o)
			before := slices.Clone(tc.f.offered)
			e.SetCoalescing(false)
			e.SetCoalescing(true)
			require.Equal(t, before, tc.f.offered, "no offload request")
		})
	}
}

// TestTunOpenFDRefusals: every refusal after detection leaves the
// descriptor as it came.
func TestTunOpenFDRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    fakeTUN
		opts *Options
		want string
		is   error
	}{
		{"tun asked as tap", fakeTUN{dev: devInfo{name: "tun6", flags: tunPlain}}, &Options{TAP: true}, "tun6 is a TUN device, which carries IP packets: adopt it without Options.TAP", nil},
		{"tap", fakeTUN{dev: devInfo{name: "tap0", flags: unix.IFF_TAP | unix.IFF_NO_PI}}, nil, "tap0 is a TAP device, which carries Ethernet frames: adopt it with Options.TAP", nil},
		{"neither", fakeTUN{dev: devInfo{name: "odd0", flags: unix.IFF_NO_PI}}, nil, "odd0 is neither a TUN nor a TAP device", nil},
		{"pi", fakeTUN{dev: devInfo{name: "tun7", flags: unix.IFF_TUN}}, nil, "without IFF_NO_PI", nil},
		{"header size", fakeTUN{dev: devInfo{name: "tun8", flags: tunPlain | unix.IFF_VNET_HDR}, hdrSize: 12, setSize: unix.EACCES}, nil, "set the virtio-net header size to 10 (it is 12)", unix.EACCES},
		{"offload", fakeTUN{dev: devInfo{name: "tun9", flags: tunPlain | unix.IFF_VNET_HDR}, hdrSize: vnet.HeaderSize, offload: func(uint) error { return unix.EIO }}, nil, "tun tun9: set offloads", unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			near, _ := blockingPair(t)
			closeAtEnd(t, near)
			_, err := openFD(tc.f.ioctls(), near, tc.opts)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.True(t, errors.Is(err, tc.is), "%v", err)
			}
			requireUntouched(t, near)
		})
	}
}

// TestTunOpenFDsAdoptsQueues: OpenFDs adopts every queue of one
// multi-queue device, and refuses descriptors of different devices, more
// than one of a single-queue device, or a count that contradicts Queues,
// leaving them untouched.
func TestTunOpenFDsAdoptsQueues(t *testing.T) {
	mq := &fakeTUN{dev: devInfo{name: "tun7", flags: tunPlain | unix.IFF_MULTI_QUEUE}, offload: func(uint) error { return nil }}
	a, _ := blockingPair(t)
	b, _ := blockingPair(t)
	e, err := openFDs(mq.ioctls(), []int{a, b}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, e.Queues())
	require.True(t, e.MultiQueue())
	e.Close()

	c, _ := blockingPair(t)
	d, _ := blockingPair(t)
	closeAtEnd(t, c)
	closeAtEnd(t, d)
	single := &fakeTUN{dev: devInfo{name: "tun7", flags: tunPlain}, offload: func(uint) error { return nil }}
	_, err = openFDs(single.ioctls(), []int{c, d}, nil)
	require.ErrorContains(t, err, "not multi-queue")
	_, err = openFDs(mq.ioctls(), []int{c, d}, &Options{Queues: 3})
	require.ErrorContains(t, err, "2 descriptors given for 3 queues")
	names := map[int]string{c: "tun7", d: "tun8"}
	two := mq.ioctls()
	two.getIff = func(fd int) (devInfo, error) { return devInfo{name: names[fd], flags: mq.dev.flags}, nil }
	_, err = openFDs(two, []int{c, d}, nil)
	require.ErrorContains(t, err, "give the queues of one device")
	_, err = OpenFDs(nil, nil)
	require.ErrorContains(t, err, "no descriptor to adopt")
	requireUntouched(t, c)
	requireUntouched(t, d)
}
