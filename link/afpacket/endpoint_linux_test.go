//go:build linux

package afpacket

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
	"github.com/ustack-dev/ustack/sched"
)

// The qdiscs find the writability signal by type assertion; the package
// itself does not import sched (link endpoints sit below it).
var _ sched.WritableNotifier = (*Endpoint)(nil)

// These tests run the endpoint over datagram socketpairs instead of packet
// sockets: the same recvmmsg, sendmmsg and netpoller paths, no privilege.
// What only AF_PACKET does (packet types, auxdata, fanout, a device that
// goes away) is tested in integration/afpacket_test.go.

// testEndpoint builds an endpoint over one socketpair per queue and
// returns it with the far ends, where the test plays the wire. sndBuf, if
// not zero, sets the endpoint sockets' send buffers; rings, if given, are
// the queues' receive rings.
func testEndpoint(t testing.TB, o *Options, sndBuf int, rings ...rxRing) (*Endpoint, []int) {
	t.Helper()
	opts, err := o.normalize()
	require.NoError(t, err)
	var near, far []int
	for range opts.Queues {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		if sndBuf > 0 {
			require.NoError(t, unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, sndBuf))
		}
		near, far = append(near, fds[0]), append(far, fds[1])
	}
	e, err := newEndpoint("test0", 0, 1500, macB, opts, near, rings)
	require.NoError(t, err)
	t.Cleanup(func() {
		e.Close()
		for _, fd := range far {
			unix.Close(fd)
		}
	})
	return e, far
}

// eventually waits for cond, which reads the endpoint's counters.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
}

// readFar reads one datagram from a far end, waiting up to 5 s.
func readFar(t *testing.T, fd int) []byte {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 5000)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a datagram within 5 s")
	b := make([]byte, rxBufSize)
	m, err := unix.Read(fd, b)
	require.NoError(t, err)
	return b[:m]
}

// txPacket builds an outgoing packet as gVisor hands it to a link: the IP
// packet ip with its network and transport headers parsed, and the
// endpoint's Ethernet header pushed.
func txPacket(e *Endpoint, ip []byte, proto tcpip.NetworkProtocolNumber) *stack.PacketBuffer {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: int(e.MaxHeaderLength()),
		Payload:            buffer.MakeWithData(bytes.Clone(ip)),
	})
	pkt.NetworkProtocolNumber = proto
	nhl := header.IPv4MinimumSize
	if proto == header.IPv6ProtocolNumber {
		nhl = header.IPv6MinimumSize
	}
	pkt.NetworkHeader().Consume(nhl)
	thl := header.UDPMinimumSize
	if len(ip) > 9 && (ip[9] == uint8(header.TCPProtocolNumber) || (nhl == header.IPv6MinimumSize && ip[6] == uint8(header.TCPProtocolNumber))) {
		thl = header.TCPMinimumSize
	}
	pkt.TransportHeader().Consume(thl)
	pkt.EgressRoute.LocalLinkAddress = e.LinkAddress()
	pkt.EgressRoute.RemoteLinkAddress = macA
	e.AddHeader(pkt)
	return pkt
}

func list(pkts ...*stack.PacketBuffer) stack.PacketBufferList {
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(p)
	}
	return l
}

func release(pkts []*stack.PacketBuffer) {
	for _, p := range pkts {
		p.DecRef()
	}
}

func TestCapabilities(t *testing.T) {
	on, _ := testEndpoint(t, nil, 0)
	require.Equal(t, stack.CapabilityResolutionRequired|stack.CapabilityRXChecksumOffload, on.Capabilities())
	require.Zero(t, on.Capabilities()&stack.CapabilityTXChecksumOffload, "no TX checksum offload claim")
	require.Equal(t, stack.HostGSOSupported, on.SupportedGSO())
	require.Equal(t, uint32(GSOMaxSize), on.GSOMaxSize())
	require.Equal(t, uint16(header.EthernetMinimumSize), on.MaxHeaderLength())
	require.Equal(t, header.ARPHardwareEther, on.ARPHardwareType())
	require.Equal(t, macB, on.LinkAddress())
	require.Equal(t, uint32(1500), on.MTU())
	on.SetMTU(9000)
	require.Equal(t, uint32(9000), on.MTU())
	on.SetLinkAddress(macA)
	require.Equal(t, macA, on.LinkAddress())

	off, _ := testEndpoint(t, &Options{NoOffload: true}, 0)
	require.Equal(t, stack.CapabilityResolutionRequired|stack.CapabilityRXChecksumOffload, off.Capabilities(), "GRO: the endpoint verifies")
	require.Equal(t, stack.HostGSOSupported, off.SupportedGSO(), "the endpoint's own segmentation")
	require.Equal(t, uint32(GSOMaxSize), off.GSOMaxSize())

	plain, _ := testEndpoint(t, &Options{NoOffload: true, NoGRO: true, NoSoftwareGSO: true}, 0)
	require.Equal(t, stack.CapabilityResolutionRequired, plain.Capabilities(), "gVisor verifies")
	require.Equal(t, stack.GSONotSupported, plain.SupportedGSO())
	require.Zero(t, plain.GSOMaxSize())
}

func TestParseHeaderRoundTrip(t *testing.T) {
	e, _ := testEndpoint(t, nil, 0)
	ip := ip4(header.UDPProtocolNumber, 1, 2, []byte("x"), "full")
	out := txPacket(e, ip, header.IPv4ProtocolNumber)
	defer out.DecRef()
	wire := out.ToView()
	defer wire.Release()
	in := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(bytes.Clone(wire.AsSlice()))})
	defer in.DecRef()
	require.True(t, e.ParseHeader(in))
	require.Equal(t, header.IPv4ProtocolNumber, in.NetworkProtocolNumber)
	eth := header.Ethernet(in.LinkHeader().Slice())
	require.Equal(t, macB, eth.SourceAddress())
	require.Equal(t, macA, eth.DestinationAddress())
	require.Equal(t, ip, in.Data().AsRange().ToSlice())

	short := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, 13))})
	defer short.DecRef()
	require.False(t, e.ParseHeader(short))
}

func TestRXDeliversAndCounts(t *testing.T) {
	e, far := testEndpoint(t, nil, 0)
	s := linktest.NewSink()
	e.Attach(s)
	require.True(t, e.IsAttached())
	good := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "full"))
	arp := frame(header.ARPProtocolNumber, make([]byte, header.ARPSize))
	for _, b := range [][]byte{
		withVnet(vnet.Header{}, good),
		withVnet(vnet.Header{}, frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "bad"))),
		withVnet(vnet.Header{}, arp),
		withVnet(vnet.Header{}, frame(0x88cc, make([]byte, 46))), // LLDP
		{1, 2, 3}, // shorter than a virtio-net header
	} {
		_, err := unix.Write(far[0], b)
		require.NoError(t, err)
	}
	eventually(t, func() bool {
		st := e.LinkStats()
		return st.RXPackets+st.RXBadChecksum+st.RXMalformed+st.RXErrors == 5
	}, "five frames accounted for")
	st := e.LinkStats()
	require.Equal(t, link.Stats{
		RXPackets: 2, RXBytes: uint64(len(good) + len(arp)), RXRounds: st.RXRounds, RXSyscalls: st.RXSyscalls,
		RXBadChecksum: 1, RXMalformed: 1, RXErrors: 1,
	}, st)
	require.NotZero(t, st.RXRounds)
	require.GreaterOrEqual(t, st.RXSyscalls, st.RXRounds)

	got := s.Wait(t, 2)
	require.Len(t, got, 2)
	if got[0].Proto != header.IPv4ProtocolNumber {
		// GRO holds TCP segments to the end of their round; the ARP
		// frame of the same round went up at once.
		got[0], got[1] = got[1], got[0]
	}
	require.Equal(t, header.IPv4ProtocolNumber, got[0].Proto)
	require.Equal(t, good[:linkHdrLen], got[0].LinkHeader, "link header set")
	require.Equal(t, good[linkHdrLen:], got[0].Payload)
	require.Equal(t, tcpip.PacketHost, got[0].PktType)
	require.Equal(t, header.ARPProtocolNumber, got[1].Proto)
}

func TestRXBatches(t *testing.T) {
	e, far := testEndpoint(t, &Options{RXBatch: 8}, 0)
	// Queue frames before attaching, so the first rounds find them waiting.
	const frames = 20
	for i := range frames {
		f := frame(header.IPv4ProtocolNumber, ip4(header.UDPProtocolNumber, uint16(i), 2, []byte{byte(i)}, "full"))
		_, err := unix.Write(far[0], withVnet(vnet.Header{}, f))
		require.NoError(t, err)
	}
	s := linktest.NewSink()
	e.Attach(s)
	eventually(t, func() bool { return e.LinkStats().RXPackets == frames }, "all frames delivered")
	st := e.LinkStats()
	require.Equal(t, uint64(3), st.RXRounds, "20 waiting frames in rounds of at most 8")
	for i, d := range s.Wait(t, frames) {
		require.Equal(t, uint16(i), header.UDP(d.Payload[header.IPv4MinimumSize:]).SourcePort(), "order kept")
	}
}

func TestRXDetached(t *testing.T) {
	e, far := testEndpoint(t, nil, 0)
	e.Attach(linktest.NewSink())
	e.Attach(nil)
	require.False(t, e.IsAttached())
	f := withVnet(vnet.Header{}, frame(header.IPv4ProtocolNumber, ip4(header.UDPProtocolNumber, 1, 2, nil, "full")))
	_, err := unix.Write(far[0], f)
	require.NoError(t, err)
	eventually(t, func() bool { return e.LinkStats().RXDetached == 1 }, "frame dropped as detached")
	require.Zero(t, e.LinkStats().RXPackets)
}

func TestTXWritesFrames(t *testing.T) {
	e, far := testEndpoint(t, nil, 0)
	payload := bytes.Repeat([]byte("0123456789"), 300)
	small := ip4(header.UDPProtocolNumber, 1, 2, []byte("small"), "full")
	big := ip4(header.TCPProtocolNumber, 3, 4, payload, "partial")
	pkts := []*stack.PacketBuffer{
		txPacket(e, small, header.IPv4ProtocolNumber),
		txPacket(e, big, header.IPv4ProtocolNumber),
	}
	defer release(pkts)
	pkts[1].GSOOptions = stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: tcpChecksumOffset, MSS: 1000, L3HdrLen: header.IPv4MinimumSize}

	n, err := e.WritePackets(list(pkts...))
	require.Nil(t, err)
	require.Equal(t, 2, n)

	wantVnet := []vnet.Header{{}, {
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1000,
		HdrLen:    linkHdrLen + header.IPv4MinimumSize + header.TCPMinimumSize,
		CsumStart: linkHdrLen + header.IPv4MinimumSize, CsumOffset: tcpChecksumOffset,
	}}
	for i, ip := range [][]byte{small, big} {
		b := readFar(t, far[0])
		h, derr := vnet.Decode(b)
		require.NoError(t, derr)
		require.Equal(t, wantVnet[i], h, "virtio-net header of packet %d", i)
		f := b[vnet.HeaderSize:]
		eth := header.Ethernet(f)
		require.Equal(t, macB, eth.SourceAddress())
		require.Equal(t, macA, eth.DestinationAddress())
		require.Equal(t, header.IPv4ProtocolNumber, eth.Type())
		require.Equal(t, ip, f[linkHdrLen:])
	}
	st := e.LinkStats()
	require.Equal(t, uint64(1), st.TXSyscalls, "one sendmmsg for the batch")
	require.Equal(t, uint64(1), st.TXCalls)
	require.Equal(t, uint64(2), st.TXPackets)
	require.Equal(t, uint64(pkts[0].Size()+pkts[1].Size()), st.TXBytes)
}

func TestTXWithoutVnetHdr(t *testing.T) {
	e, far := testEndpoint(t, &Options{NoOffload: true}, 0)
	ip := ip6(header.UDPProtocolNumber, 1, 2, []byte("plain"), "full")
	pkt := txPacket(e, ip, header.IPv6ProtocolNumber)
	defer pkt.DecRef()
	n, err := e.WritePackets(list(pkt))
	require.Nil(t, err)
	require.Equal(t, 1, n)
	b := readFar(t, far[0])
	require.Equal(t, linkHdrLen+len(ip), len(b), "no virtio-net header")
	require.Equal(t, ip, b[linkHdrLen:])
}

func TestTXBatchSize(t *testing.T) {
	for _, tc := range []struct {
		batch, pkts int
		syscalls    uint64
	}{{1, 5, 5}, {2, 5, 3}, {64, 5, 1}, {4, 64, 16}} {
		e, far := testEndpoint(t, &Options{TXBatch: tc.batch}, 0)
		var pkts []*stack.PacketBuffer
		for i := range tc.pkts {
			pkts = append(pkts, txPacket(e, ip4(header.UDPProtocolNumber, uint16(i), 2, nil, "full"), header.IPv4ProtocolNumber))
		}
		n, err := e.WritePackets(list(pkts...))
		require.Nil(t, err)
		require.Equal(t, tc.pkts, n)
		require.Equal(t, tc.syscalls, e.LinkStats().TXSyscalls, "batch %d, %d packets", tc.batch, tc.pkts)
		for i := range tc.pkts {
			b := readFar(t, far[0])
			require.Equal(t, uint16(i), header.UDP(b[vnet.HeaderSize+linkHdrLen+header.IPv4MinimumSize:]).SourcePort(), "order")
		}
		release(pkts)
	}
}

// TestTXBackpressure fills the socket's send buffer: the refused rest is
// returned with ErrNoBufferSpace and counted in TXFull, the writability
// callback comes only once the far end has drained, and the rest then
// goes through.
func TestTXBackpressure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rings []rxRing
	}{{"recvmmsg", nil}, {"block ring", []rxRing{{blocks: &ring{}}}}, {"slot ring", []rxRing{{slots: &slotRing{}}}}} {
		// A queue that receives from a ring transmits all the same
		// (its unmapped ring is never read: nothing is attached).
		t.Run(tc.name, func(t *testing.T) { testTXBackpressure(t, tc.rings) })
	}
}

func testTXBackpressure(t *testing.T, rings []rxRing) {
	e, far := testEndpoint(t, nil, 16<<10, rings...)
	var notified atomic.Int32
	wake := make(chan struct{}, 16)
	e.NotifyWritable(func() {
		notified.Add(1)
		wake <- struct{}{}
	})
	var pkts []*stack.PacketBuffer
	for i := range 256 {
		pkts = append(pkts, txPacket(e, ip4(header.UDPProtocolNumber, uint16(i), 2, make([]byte, 1000), "full"), header.IPv4ProtocolNumber))
	}
	defer release(pkts)

	n, err := e.WritePackets(list(pkts...))
	require.IsType(t, &tcpip.ErrNoBufferSpace{}, err)
	require.Less(t, n, len(pkts))
	st := e.LinkStats()
	require.Equal(t, uint64(n), st.TXPackets)
	require.Equal(t, uint64(len(pkts)-n), st.TXFull)
	// Nothing drains the far end yet, so the socket stays full.
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, notified.Load(), "writable signal before anything drained")

	for range n {
		readFar(t, far[0])
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no writable signal after the far end drained")
	}
	sent := n
	for sent < len(pkts) {
		m, err := e.WritePackets(list(pkts[sent:]...))
		sent += m
		for range m {
			readFar(t, far[0])
		}
		if err != nil {
			require.IsType(t, &tcpip.ErrNoBufferSpace{}, err)
			select {
			case <-wake:
			case <-time.After(10 * time.Second):
				t.Fatal("no writable signal")
			}
		}
	}
	require.Equal(t, uint64(len(pkts)), e.LinkStats().TXPackets)
}

func TestTXQueuesByFlow(t *testing.T) {
	const queues, flows = 4, 32
	e, far := testEndpoint(t, &Options{Queues: queues}, 0)
	var pkts []*stack.PacketBuffer
	// Two rounds of the same flows, so each flow has two packets.
	for round := range 2 {
		for f := range flows {
			ip := ip4(header.UDPProtocolNumber, uint16(5000+f), 53, []byte{byte(round)}, "full")
			pkts = append(pkts, txPacket(e, ip, header.IPv4ProtocolNumber))
		}
	}
	defer release(pkts)
	n, err := e.WritePackets(list(pkts...))
	require.Nil(t, err)
	require.Equal(t, len(pkts), n)

	seen := map[uint16][]int{} // flow's source port -> queue of each packet
	used := 0
	for q, fd := range far {
		got := int(e.QueueStats()[q].TXPackets)
		if got > 0 {
			used++
		}
		for range got {
			b := readFar(t, fd)
			ip := b[vnet.HeaderSize+linkHdrLen:]
			port := header.UDP(ip[header.IPv4MinimumSize:]).SourcePort()
			round := int(ip[header.IPv4MinimumSize+header.UDPMinimumSize])
			require.Equal(t, len(seen[port]), round, "flow %d: packets in order", port)
			seen[port] = append(seen[port], q)
		}
	}
	require.Len(t, seen, flows)
	for port, qs := range seen {
		require.Equal(t, []int{qs[0], qs[0]}, qs, "flow %d stays on one queue", port)
	}
	require.Greater(t, used, 1, "flows spread over queues")
}

// TestTXNoAllocs: a WritePackets call allocates nothing once warm: with
// the cache (the owner's scratch) and without (sync.Pool's, which the race
// detector empties at random, so that case runs without it only).
func TestTXNoAllocs(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		if noCache && testenv.RaceEnabled {
			continue
		}
		e, far := testEndpoint(t, &Options{NoCache: noCache}, 0)
		var pkts []*stack.PacketBuffer
		for i := range 8 {
			pkts = append(pkts, txPacket(e, ip4(header.UDPProtocolNumber, uint16(i), 2, nil, "full"), header.IPv4ProtocolNumber))
		}
		drain := make([]byte, rxBufSize)
		l := list(pkts...) // WritePackets leaves the list as it is
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := e.WritePackets(l); err != nil {
				t.Fatal(err)
			}
			for range pkts {
				unix.Read(far[0], drain)
			}
		})
		release(pkts)
		require.Zero(t, allocs, "allocations per WritePackets call (NoCache %v)", noCache)
	}
}

func TestCloseIsIdempotentAndRefusesWrites(t *testing.T) {
	e, _ := testEndpoint(t, nil, 0)
	var actions atomic.Int32
	e.SetOnCloseAction(func() {
		actions.Add(1)
		e.Close() // gVisor's action removes the NIC, which closes again
	})
	e.Attach(linktest.NewSink()) // an RX goroutine is parked in the netpoller
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	e.Close()
	require.Equal(t, int32(1), actions.Load())
	require.False(t, e.IsAttached())

	pkt := txPacket(e, ip4(header.UDPProtocolNumber, 1, 2, nil, "full"), header.IPv4ProtocolNumber)
	defer pkt.DecRef()
	n, err := e.WritePackets(list(pkt, pkt))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	st := e.LinkStats()
	require.Equal(t, uint64(2), st.TXClosed)
	require.Equal(t, uint64(1), st.TXCalls)
	require.NoError(t, e.Err(), "Close is not a device failure")
	e.Attach(linktest.NewSink()) // after Close: starts nothing
}

// TestTXDeviceGone: a send the kernel fails because the interface is gone
// (ENODEV) drops the rest, stops the endpoint, and Err matches
// link.ErrDeviceGone; later writes fail at once.
func TestTXDeviceGone(t *testing.T) {
	e, _ := testEndpoint(t, nil, 0)
	terr := e.queues[0].refused(3, unix.ENODEV)
	require.IsType(t, &tcpip.ErrClosedForSend{}, terr)
	require.ErrorIs(t, e.Err(), link.ErrDeviceGone)
	require.ErrorIs(t, e.Err(), unix.ENODEV)
	require.ErrorContains(t, e.Err(), `afpacket: interface "test0"`)

	pkt := txPacket(e, ip4(header.UDPProtocolNumber, 1, 2, nil, "full"), header.IPv4ProtocolNumber)
	defer pkt.DecRef()
	n, err := e.WritePackets(list(pkt, pkt))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	require.Equal(t, uint64(3+2), e.LinkStats().TXErrors)
}

// tcpSeq4 builds an IPv4 TCP segment of one flow at sequence number seq,
// with right checksums.
func tcpSeq4(seq uint32, payload []byte) []byte {
	b := ip4(header.TCPProtocolNumber, 1, 2, payload, "full")
	tcp := header.TCP(b[header.IPv4MinimumSize:])
	tcp.SetSequenceNumber(seq)
	tcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src4, dst4, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	return b
}

// TestRXGRO: without the virtio-net header, the segments of one flow that
// one round reads climb the stack as one (checked by the endpoint, which
// drops a bad one); with NoGRO each goes up alone, for gVisor to check.
func TestRXGRO(t *testing.T) {
	for _, nogro := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoGRO=%v", nogro), func(t *testing.T) {
			e, far := testEndpoint(t, &Options{NoOffload: true, NoGRO: nogro}, 0)
			const n, size = 4, 1000
			for i := range n {
				_, err := unix.Write(far[0], frame(header.IPv4ProtocolNumber, tcpSeq4(uint32(100+i*size), make([]byte, size))))
				require.NoError(t, err)
			}
			bad := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 3, 4, []byte("x"), "bad"))
			_, err := unix.Write(far[0], bad)
			require.NoError(t, err)
			s := linktest.NewSink()
			e.Attach(s)
			eventually(t, func() bool {
				st := e.LinkStats()
				return st.RXPackets+st.RXBadChecksum == n+1
			}, "all frames accounted for")
			if nogro {
				require.Len(t, s.Wait(t, n+1), n+1)
				return
			}
			got := s.Wait(t, 1)
			require.Len(t, got, 1)
			require.Len(t, got[0].Payload, header.IPv4MinimumSize+header.TCPMinimumSize+n*size, "one round: one segment")
			require.Equal(t, uint64(1), e.LinkStats().RXBadChecksum)
		})
	}
}
