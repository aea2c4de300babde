//go:build linux

package tun

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	ustack "github.com/ustack-dev/ustack/stack"
)

// The TAP tests stand a SOCK_SEQPACKET socketpair in for a TAP device's
// queue, as the TUN tests do; the peer writes and reads what the kernel's
// side of the device would: Ethernet frames, behind a virtio-net header
// when the endpoint has one.

// tapOptions returns o (nil: the defaults) for a TAP device whose ustack
// side is ustackMAC.
func tapOptions(o *Options) *Options {
	r := DefaultOptions()
	if o != nil {
		r = *o
	}
	r.TAP, r.MAC = true, net.HardwareAddr(ustackMAC)
	return &r
}

// ethFrame is the IP packet (or ARP message) p in an Ethernet frame from
// the kernel's side to dst.
func ethFrame(dst tcpip.LinkAddress, proto tcpip.NetworkProtocolNumber, p []byte) []byte {
	b := make([]byte, header.EthernetMinimumSize, header.EthernetMinimumSize+len(p))
	header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: kernelMAC, DstAddr: dst, Type: proto})
	return append(b, p...)
}

// arpRequest is an ARP request from the kernel's side for ustack's
// address.
func arpRequest() []byte {
	b := make([]byte, header.ARPSize)
	a := header.ARP(b)
	a.SetIPv4OverEthernet()
	a.SetOp(header.ARPRequest)
	copy(a.HardwareAddressSender(), kernelMAC)
	copy(a.ProtocolAddressSender(), src4.AsSlice())
	copy(a.ProtocolAddressTarget(), dst4.AsSlice())
	return b
}

// udp6Packet is an IPv6 UDP datagram to dst (checksum not computed: its
// frames carry the kernel's DATA_VALID verdict).
func udp6Packet(dst tcpip.Address, payload []byte) []byte {
	l := header.UDPMinimumSize + len(payload)
	b := make([]byte, header.IPv6MinimumSize+l)
	header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(l), TransportProtocol: header.UDPProtocolNumber, HopLimit: 1, SrcAddr: src6, DstAddr: dst})
	header.UDP(b[header.IPv6MinimumSize:]).Encode(&header.UDPFields{SrcPort: 1, DstPort: 2, Length: uint16(l)})
	copy(b[header.IPv6MinimumSize+header.UDPMinimumSize:], payload)
	return b
}

// TestTapReceive: the receive path parses every frame's Ethernet header
// before GRO and the stack: it delivers IPv4, IPv6 and ARP with their
// link header consumed and the packet type set, checks checksums and
// splits USO past the header, and drops (counted) what is not for this
// host or not IP or ARP.
func TestTapReceive(t *testing.T) {
	e, _ := pairEndpoint(t, 1, fullOffloads, tapOptions(nil))
	q := e.queues[0]
	r := linktest.NewSink()
	e.AttachAndStart(r, func() {}) // deliver to the sink, without the receive goroutines
	valid := vnet.Header{Flags: vnet.FlagDataValid}
	good := tcp4Packet([]byte("hello"), 1)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	small := tcp4Packet([]byte("x"), 2)
	padded := append(ethFrame(ustackMAC, header.IPv4ProtocolNumber, small), make([]byte, 60-header.EthernetMinimumSize-len(small))...)
	multicast := udp6Packet(tcpip.AddrFrom16([16]byte{0xff, 0x02, 15: 1}), []byte("to all nodes"))
	super, h := udpSuper(false, make([]byte, 2500))
	uso, usoH := withLink(ethHeader(header.IPv4ProtocolNumber), super, h)
	tso := tcp4Packet(make([]byte, 5000), 3)
	tsoH := vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1000, HdrLen: 14 + 40, CsumStart: 14 + 20, CsumOffset: 16}

	type want struct {
		proto   tcpip.NetworkProtocolNumber
		pktType tcpip.PacketType
		payload []byte
	}
	var wants []want
	var others []linktest.Packet // delivered, but for USO's datagrams
	for _, tc := range []struct {
		name  string
		frame []byte
		want  []want
	}{
		{"unicast IPv4", frame(vnet.Header{}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, good)), []want{{header.IPv4ProtocolNumber, tcpip.PacketHost, good}}},
		{"bad checksum", frame(vnet.Header{}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, bad)), nil},
		{"the kernel's verdict stands", frame(valid, ethFrame(ustackMAC, header.IPv4ProtocolNumber, bad)), []want{{header.IPv4ProtocolNumber, tcpip.PacketHost, bad}}},
		{"padded to Ethernet's minimum", frame(valid, padded), []want{{header.IPv4ProtocolNumber, tcpip.PacketHost, small}}},
		{"ARP broadcast", frame(vnet.Header{}, ethFrame(header.EthernetBroadcastAddress, header.ARPProtocolNumber, arpRequest())), []want{{header.ARPProtocolNumber, tcpip.PacketBroadcast, arpRequest()}}},
		{"IPv6 multicast", frame(valid, ethFrame(header.EthernetAddressFromMulticastIPv6Address(tcpip.AddrFrom16([16]byte{0xff, 0x02, 15: 1})), header.IPv6ProtocolNumber, multicast)), []want{{header.IPv6ProtocolNumber, tcpip.PacketMulticast, multicast}}},
		{"USO", frame(usoH, uso), nil}, // checked below: three datagrams
		{"TSO", frame(tsoH, ethFrame(ustackMAC, header.IPv4ProtocolNumber, tso)), []want{{header.IPv4ProtocolNumber, tcpip.PacketHost, tso}}},
		{"another host's", frame(valid, ethFrame("\x02\x00\x00\x00\x00\x99", header.IPv4ProtocolNumber, good)), nil},
		{"not IP or ARP", frame(valid, ethFrame(ustackMAC, 0x88cc, good)), nil},
		{"shorter than an Ethernet header", frame(valid, ethFrame(ustackMAC, header.IPv4ProtocolNumber, nil)[:10]), nil},
	} {
		before := r.Len()
		receiveOne(q, tc.frame)
		if tc.name == "USO" {
			got := r.Packets()[before:]
			require.Len(t, got, 3, "USO: three datagrams")
			for _, p := range got {
				require.Equal(t, ethHeader(header.IPv4ProtocolNumber), p.LinkHeader, "USO datagram behind the frame's header")
				require.True(t, vnet.VerifyIP(p.Payload), "USO datagram with right checksums")
				require.Equal(t, tcpip.PacketHost, p.PktType)
			}
			continue
		}
		wants = append(wants, tc.want...)
		require.Equal(t, before+len(tc.want), r.Len(), "%s: delivered", tc.name)
		others = append(others, r.Packets()[before:]...)
	}
	got := others
	require.Len(t, got, len(wants))
	for i, w := range wants {
		require.Equal(t, w.proto, got[i].Proto, "packet %d", i)
		require.Equal(t, w.pktType, got[i].PktType, "packet %d", i)
		require.Len(t, got[i].LinkHeader, header.EthernetMinimumSize, "packet %d: its Ethernet header consumed", i)
		require.Equal(t, w.payload, got[i].Payload, "packet %d", i)
	}
	s := e.LinkStats()
	require.Equal(t, uint64(1), s.RXBadChecksum)
	require.Equal(t, uint64(2), s.RXMalformed, "another host's, not IP or ARP")
	require.Equal(t, uint64(1), s.RXErrors, "shorter than an Ethernet header")
	require.Equal(t, uint64(r.Len()), s.RXPackets)
	require.Equal(t, OffloadStats{RXSuperSegments: 1, RXUSOSplit: 1, RXUSODatagrams: 3}, e.OffloadStats())
}

// TestTapPushed: a pushed TCP segment is found behind the Ethernet header
// (and the virtio-net header), and nothing that is not IP is taken for
// one.
func TestTapPushed(t *testing.T) {
	p := tcp4Segment([]byte("request"), 1, 7)
	header.TCP(p[header.IPv4MinimumSize:]).SetFlags(uint8(header.TCPFlagAck | header.TCPFlagPsh))
	f := ethFrame(ustackMAC, header.IPv4ProtocolNumber, p)
	require.True(t, pushed(f, false, header.EthernetMinimumSize))
	require.True(t, pushed(frame(vnet.Header{}, f), true, header.EthernetMinimumSize))
	require.False(t, pushed(f, false, 0), "an Ethernet frame is no IP packet")
	require.False(t, pushed(ethFrame(ustackMAC, header.ARPProtocolNumber, p), false, header.EthernetMinimumSize), "not IP")
	require.False(t, pushed(f[:10], false, header.EthernetMinimumSize))
}

// TestTapWritePackets: what the stack sends leaves framed by gVisor's
// Ethernet endpoint, and a super-segment's virtio-net header counts the
// Ethernet header in its offsets; without the header a batch leaves
// framed too (through the ring where there is one).
func TestTapWritePackets(t *testing.T) {
	e, peers := pairEndpoint(t, 1, fullOffloads, tapOptions(nil))
	w := e.Ethernet()
	payload := make([]byte, 40000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := outPacket(1000, payload, true)
	defer super.DecRef()
	writeFramed(t, w, super)
	got := readPeer(t, peers[0])
	h, derr := vnet.Decode(got)
	require.NoError(t, derr)
	require.Equal(t, vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, HdrLen: 14 + 40, GSOSize: 1000, CsumStart: 14 + 20, CsumOffset: 16}, h)
	eth := header.Ethernet(got[vnet.HeaderSize:])
	require.Equal(t, kernelMAC, eth.DestinationAddress())
	require.Equal(t, ustackMAC, eth.SourceAddress())
	require.Equal(t, header.IPv4ProtocolNumber, eth.Type())
	require.Equal(t, flat(super), got[vnet.HeaderSize:], "header, frame and every view in one write")

	e, peers = pairEndpoint(t, 1, Offloads{}, tapOptions(nil))
	w = e.Ethernet()
	var pkts []*stack.PacketBuffer
	for i := range 3 {
		p := outPacket(uint16(2000+i), make([]byte, 100+i), false)
		defer p.DecRef()
		pkts = append(pkts, p)
	}
	writeFramed(t, w, pkts...)
	for i, p := range pkts {
		f := readPeer(t, peers[0])
		require.Equal(t, flat(p), f, "frame %d", i)
		require.Equal(t, ustackMAC, header.Ethernet(f).SourceAddress(), "frame %d", i)
	}
}

// writeFramed sends pkts from ustack to the kernel's MAC as a stack
// does: gVisor's Ethernet endpoint frames each, then writes them all in
// one call, which must take them all.
func writeFramed(t *testing.T, w *EthernetEndpoint, pkts ...*stack.PacketBuffer) {
	t.Helper()
	for _, p := range pkts {
		p.EgressRoute.LocalLinkAddress, p.EgressRoute.RemoteLinkAddress = w.LinkAddress(), kernelMAC
		w.AddHeader(p)
	}
	n, err := w.WritePackets(list(pkts...))
	require.Nil(t, err)
	require.Equal(t, len(pkts), n)
}

// lifecycleMethods are the Endpoint's methods that come from its
// attachment bookkeeping (linkutil.Lifecycle) and are not features a
// wrapper passes on: a wrapper keeps its own, or gVisor's.
func lifecycleMethods() map[string]bool {
	m := map[string]bool{}
	lt := reflect.TypeFor[*linkutil.Lifecycle]()
	for i := range lt.NumMethod() {
		m[lt.Method(i).Name] = true
	}
	for _, own := range []string{"IsAttached", "SetOnCloseAction", "Wait"} {
		delete(m, own) // stack.LinkEndpoint's: the wrapper must have them
	}
	return m
}

// TestTapEthernetTransparent: the Ethernet endpoint has every method of
// the Endpoint (but its attachment bookkeeping), with the same signature,
// so that a stack finds through it every optional interface the Endpoint
// implements, today's and any added later; and each passes through to the
// Endpoint.
func TestTapEthernetTransparent(t *testing.T) {
	et, wt := reflect.TypeFor[*Endpoint](), reflect.TypeFor[*EthernetEndpoint]()
	skip := lifecycleMethods()
	for i := range et.NumMethod() {
		m := et.Method(i)
		if skip[m.Name] {
			continue
		}
		wm, ok := wt.MethodByName(m.Name)
		require.True(t, ok, "EthernetEndpoint lacks the Endpoint's %s: a wrapper that hides a method switches its feature off", m.Name)
		// Drop the receivers before comparing.
		require.Equal(t, fmt.Sprint(m.Type)[len("func(*tun.Endpoint"):], fmt.Sprint(wm.Type)[len("func(*tun.EthernetEndpoint"):], "%s's signature", m.Name)
	}
	var w any = (*EthernetEndpoint)(nil)
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"stack.LinkEndpoint", implements[stack.LinkEndpoint](w)},
		{"stack.GSOEndpoint", implements[stack.GSOEndpoint](w)},
		{"poll.Source", implements[poll.Source](w)},
		{"link.Reporter", implements[link.Reporter](w)},
		{"link.Coalescer", implements[link.Coalescer](w)},
		{"sched.RoundNotifier", implements[sched.RoundNotifier](w)},
		{"sched.WritableNotifier", implements[sched.WritableNotifier](w)},
		{"CacheStats", implements[interface{ CacheStats() cache.Stats }](w)},
		{"Err", implements[interface{ Err() error }](w)},
	} {
		require.True(t, c.ok, "EthernetEndpoint implements %s", c.name)
	}

	e, peers := pairEndpoint(t, 1, fullOffloads, tapOptions(&Options{MTU: 9000}))
	w2 := e.Ethernet()
	require.Same(t, w2, e.Ethernet(), "always the same wrapper")
	require.Same(t, e, w2.Unwrap())
	require.True(t, w2.TAP())
	require.Equal(t, uint32(9000), w2.MTU(), "the packet MTU")
	require.Equal(t, uint32(9000+header.EthernetMinimumSize), e.MTU(), "the frame MTU inside")
	w2.SetMTU(1500)
	require.Equal(t, uint32(1500), w2.MTU())
	require.Equal(t, uint16(header.EthernetMinimumSize), w2.MaxHeaderLength())
	require.Equal(t, header.ARPHardwareEther, w2.ARPHardwareType())
	require.Equal(t, ustackMAC, w2.LinkAddress())
	require.Equal(t, stack.CapabilityRXChecksumOffload|stack.CapabilityResolutionRequired, w2.Capabilities())
	require.Equal(t, stack.HostGSOSupported, w2.SupportedGSO())
	require.Equal(t, uint32(HostGSOMaxSize), w2.GSOMaxSize())
	require.Equal(t, e.Name(), w2.Name())
	require.Equal(t, e.Offloads(), w2.Offloads())

	// Writability: the Endpoint's watcher calls what was given to the
	// wrapper.
	called := make(chan struct{}, 1)
	w2.NotifyWritable(func() { called <- struct{}{} })
	e.notifyWritable()
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatal("the writability callback given to the wrapper was not the Endpoint's")
	}
	// Rounds: a discipline's hooks given to the wrapper wrap the
	// Endpoint's receive rounds.
	var begins, ends int
	w2.NotifyRounds(func() { begins++ }, func() { ends++ })
	// Busy polling through the wrapper receives, and delivers through it
	// to the stack.
	r := linktest.NewSink()
	w2.Attach(r)
	require.True(t, w2.IsAttached())
	w2.BusyPollBegin()
	_, err := unix.Write(peers[0], frame(vnet.Header{Flags: vnet.FlagDataValid}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, tcp4Packet([]byte("polled"), 9))))
	require.NoError(t, err)
	polled := 0
	deadline := time.Now().Add(10 * time.Second)
	for polled == 0 && time.Now().Before(deadline) {
		polled += w2.BusyPoll()
	}
	require.True(t, w2.BusyPollWatchdog(), "a reader claims to poll")
	w2.BusyPollEnd()
	require.False(t, w2.BusyPollWatchdog(), "no reader claims to poll")
	require.Equal(t, 1, polled, "busy polled through the wrapper")
	got := r.Wait(t, 1)
	require.Equal(t, header.IPv4ProtocolNumber, got[0].Proto)
	require.Equal(t, tcpip.PacketHost, got[0].PktType)
	require.Len(t, got[0].LinkHeader, header.EthernetMinimumSize)
	require.Equal(t, 1, begins, "a round's begin hook")
	require.Equal(t, 1, ends, "a round's end hook")
	// Counters, caches, coalescing, errors: the Endpoint's.
	require.Equal(t, e.LinkStats(), w2.LinkStats())
	require.Equal(t, uint64(1), w2.LinkStats().RXBusyPolled)
	require.Equal(t, e.QueueStats(), w2.QueueStats())
	require.Equal(t, e.CacheStats(), w2.CacheStats())
	require.Equal(t, e.OffloadStats(), w2.OffloadStats())
	w2.SetCoalescing(false)
	require.NoError(t, w2.Err())
	e.failGone(unix.EBADFD)
	require.ErrorIs(t, w2.Err(), link.ErrDeviceGone)
	w2.Attach(nil)
	require.False(t, e.IsAttached(), "detaching the wrapper detaches the Endpoint")
	// The queue's GRO belongs to its receive loop, which runs until
	// Close: only then may this goroutine begin a round on it.
	e.Close()
	g := &e.queues[0].gro
	require.Zero(t, g.ThinnedACKs())
	g.Begin(r)
	require.False(t, g.Enabled(), "coalescing turned off through the wrapper")
	g.Flush()
	g.SetCoalescing(true)
	g.Begin(r)
	require.True(t, g.Enabled(), "the queue coalesces when not told otherwise")
	g.Flush()
}

// implements reports whether v implements I.
func implements[I any](v any) bool { _, ok := v.(I); return ok }

// TestTapAttachedWithoutEthernet: a TAP endpoint given to a stack without
// its Ethernet framing stays detached and says why.
func TestTapAttachedWithoutEthernet(t *testing.T) {
	e, _ := pairEndpoint(t, 1, fullOffloads, tapOptions(nil))
	e.Attach(linktest.NewSink())
	require.False(t, e.IsAttached())
	require.ErrorContains(t, e.Err(), "tun pair: a TAP endpoint was attached to a stack directly, without its Ethernet framing: give the stack its Ethernet() instead")
	p := outPacket(1, nil, false)
	defer p.DecRef()
	n, err := e.WritePackets(list(p))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)

	tunEP, _ := pairEndpoint(t, 1, fullOffloads, nil)
	require.Nil(t, tunEP.Ethernet(), "a TUN endpoint goes into a stack as it is")
	require.False(t, tunEP.TAP())
	require.Empty(t, tunEP.LinkAddress())
}

// tapStackPair is two ustack hosts whose TAP endpoints face each other
// over one socketpair, as ustack and a kernel face each other over a TAP
// device: each side's frames are the other's.
func tapStackPair(t *testing.T, off Offloads) (a, b *ustack.Stack) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	require.NoError(t, err)
	macs := []tcpip.LinkAddress{ustackMAC, kernelMAC}
	addrs := [][]netip.Prefix{
		{netip.MustParsePrefix("198.18.30.1/24"), netip.MustParsePrefix("fd00:30::1/64")},
		{netip.MustParsePrefix("198.18.30.2/24"), netip.MustParsePrefix("fd00:30::2/64")},
	}
	var hosts []*ustack.Stack
	for i, fd := range fds {
		o, err := (&Options{TAP: true, MAC: net.HardwareAddr(macs[i])}).normalize()
		require.NoError(t, err)
		e := newEndpoint(devInfo{name: fmt.Sprintf("pair%d", i), flags: unix.IFF_TAP}, o, off, []int{fd})
		s, err := ustack.New(nil)
		if err != nil {
			e.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		id, err := s.AddNIC(e.Ethernet(), &ustack.NICOptions{Name: "tap"})
		if err != nil {
			e.Close()
			t.Fatal(err)
		}
		for _, p := range addrs[i] {
			require.NoError(t, s.AddAddress(id, p))
		}
		hosts = append(hosts, s)
	}
	return hosts[0], hosts[1]
}

// TestTapStacks: two ustack hosts over TAP endpoints resolve each other
// (ARP, and IPv6 neighbour discovery), answer pings, and carry a checked
// TCP transfer both ways and UDP, with and without the virtio-net header.
func TestTapStacks(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  Offloads
	}{{"plain", Offloads{}}, {"vnet", fullOffloads}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tapStackPair(t, tc.off)
			for _, dst := range []netip.Addr{netip.MustParseAddr("198.18.30.2"), netip.MustParseAddr("fd00:30::2")} {
				pingUntil(t, a, dst)
			}
			for i, dst := range []netip.Addr{netip.MustParseAddr("198.18.30.2"), netip.MustParseAddr("fd00:30::2")} {
				port := uint16(5100 + i)
				ln, err := b.ListenTCP(netip.AddrPortFrom(dst, port))
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ac, err := a.DialTCP(ctx, netip.AddrPortFrom(dst, port))
				cancel()
				require.NoError(t, err)
				bc, err := ln.Accept()
				require.NoError(t, err)
				ln.Close()
				const size = 4 << 20
				_, err = xfer.Exchange(ac, bc, size, xfer.Timeout(size))
				ac.Close()
				bc.Close()
				require.NoError(t, err, "TCP to %v", dst)

				pc, err := b.ListenUDP(netip.AddrPortFrom(dst, port))
				require.NoError(t, err)
				done := make(chan struct{})
				go func() { defer close(done); xfer.EchoPackets(pc) }()
				uc, err := a.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(dst, port))
				require.NoError(t, err)
				require.NoError(t, uc.SetDeadline(time.Now().Add(10*time.Second)))
				buf := make([]byte, 65536)
				for _, size := range []int{1, 1400, 3000, 30000} {
					msg := bytes.Repeat([]byte{byte(size)}, size)
					_, err := uc.Write(msg)
					require.NoError(t, err)
					n, err := uc.Read(buf)
					require.NoError(t, err, "UDP echo of %d bytes from %v", size, dst)
					require.Equal(t, msg, buf[:n], "UDP echo of %d bytes from %v", size, dst)
				}
				uc.Close()
				pc.Close()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the UDP echo did not stop")
				}
			}
		})
	}
}

// pingUntil pings dst from s until it answers, for up to 10 s: the first
// pings may go while neighbour resolution or duplicate address detection
// is under way.
func pingUntil(t *testing.T, s *ustack.Stack, dst netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := s.Ping(ctx, dst, []byte("tap"))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %v: %v", dst, err)
		}
	}
}

// TestTapOpenFD: a TAP device's descriptor is adopted with Options.TAP:
// the virtio-net header negotiated as on TUN, the MTU given taken as the
// packet MTU, and frames both ways through its Ethernet endpoint.
func TestTapOpenFD(t *testing.T) {
	f := &fakeTUN{dev: devInfo{name: "tap5", flags: unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR}, hdrSize: vnet.HeaderSize, offload: noUSO}
	e, _, peer := adopt(t, f, tapOptions(&Options{MTU: 1400}))
	require.True(t, e.TAP())
	w := e.Ethernet()
	require.NotNil(t, w)
	require.Equal(t, uint32(1400), w.MTU())
	require.Equal(t, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true}, e.Offloads())
	r := linktest.NewSink()
	w.Attach(r)
	in := tcp4Packet([]byte("from the kernel"), 7)
	_, err := unix.Write(peer, frame(vnet.Header{Flags: vnet.FlagDataValid}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, in)))
	require.NoError(t, err)
	got := r.Wait(t, 1)
	require.Equal(t, in, got[0].Payload)
	require.Equal(t, tcpip.PacketHost, got[0].PktType)

	pkt := outPacket(9, []byte("from ustack"), false)
	defer pkt.DecRef()
	writeFramed(t, w, pkt)
	out := readPeer(t, peer)
	require.Equal(t, flat(pkt), out[vnet.HeaderSize:])
	require.Equal(t, kernelMAC, header.Ethernet(out[vnet.HeaderSize:]).DestinationAddress())
}

// FuzzTapReceive: nothing a TAP device hands over panics the receive path;
// every packet delivered is IPv4, IPv6 or ARP with its Ethernet header
// consumed and a packet type that is not another host's, its payload no
// larger than what was read; and every frame is accounted for once.
func FuzzTapReceive(f *testing.F) {
	valid := vnet.Header{Flags: vnet.FlagDataValid}
	super, h := udpSuper(false, make([]byte, 2500))
	uso, usoH := withLink(ethHeader(header.IPv4ProtocolNumber), super, h)
	f.Add(frame(usoH, uso))
	f.Add(frame(vnet.Header{}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, tcp4Packet([]byte("seed"), 1))))
	f.Add(frame(valid, ethFrame(header.EthernetBroadcastAddress, header.ARPProtocolNumber, arpRequest())))
	f.Add(frame(valid, ethFrame(header.EthernetAddressFromMulticastIPv6Address(tcpip.AddrFrom16([16]byte{0xff, 0x02, 15: 1})), header.IPv6ProtocolNumber, udp6Packet(tcpip.AddrFrom16([16]byte{0xff, 0x02, 15: 1}), []byte("nd")))))
	f.Add(frame(vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 100, HdrLen: 14 + 40, CsumStart: 14 + 20, CsumOffset: 16}, ethFrame(ustackMAC, header.IPv4ProtocolNumber, tcp4Packet(make([]byte, 500), 2))))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, _ := pairEndpoint(t, 1, fullOffloads, tapOptions(nil))
		q := e.queues[0]
		r := linktest.NewSink()
		e.AttachAndStart(r, func() {}) // deliver without starting the receive goroutines
		receiveOne(q, b)
		for _, p := range r.Packets() {
			switch p.Proto {
			case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber, header.ARPProtocolNumber:
			default:
				t.Fatalf("delivered a packet of protocol %#x", p.Proto)
			}
			if len(p.LinkHeader) != header.EthernetMinimumSize {
				t.Fatalf("delivered with a %d-byte link header", len(p.LinkHeader))
			}
			if p.PktType == tcpip.PacketOtherHost {
				t.Fatal("delivered another host's frame")
			}
			if len(p.Data) > len(b) {
				t.Fatalf("delivered %d bytes from a %d-byte read", len(p.Data), len(b))
			}
		}
		s := e.LinkStats()
		dropped := s.RXErrors + s.RXBadChecksum + s.RXMalformed
		if !(dropped == 1 && s.RXPackets == 0) && !(dropped == 0 && s.RXPackets >= 1) {
			t.Fatalf("frame counted %d times as dropped and delivered as %d packets: %+v", dropped, s.RXPackets, s)
		}
	})
}
