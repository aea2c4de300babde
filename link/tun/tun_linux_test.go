//go:build linux

package tun

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// The tests here stand a SOCK_SEQPACKET socketpair in for the TUN device:
// it keeps packet boundaries, reads and writes one packet per call,
// refuses writes with EAGAIN when its send buffer is full, and polls like
// a device, so the endpoint's own loops, writes and backpressure run
// unprivileged. Open itself is tested in integration/, against the kernel.

// pairEndpoint builds an endpoint over n socketpairs and returns the peer
// ends (blocking, with a receive timeout), closed when the test ends. With
// o.TAP the socketpairs stand in for a TAP device's queues.
func pairEndpoint(t testing.TB, n int, off Offloads, o *Options) (*Endpoint, []int) {
	t.Helper()
	opts, err := o.normalize()
	require.NoError(t, err)
	opts.Queues = n
	var near, peers []int
	for range n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		require.NoError(t, unix.SetNonblock(fds[0], true))
		require.NoError(t, unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}))
		near, peers = append(near, fds[0]), append(peers, fds[1])
		t.Cleanup(func() { unix.Close(fds[1]) })
	}
	d := devInfo{name: "pair", flags: unix.IFF_TUN}
	if opts.TAP {
		d.flags = unix.IFF_TAP
	}
	e := newEndpoint(d, opts, off, near)
	t.Cleanup(e.Close)
	return e, peers
}

var fullOffloads = Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true, USO4: true, USO6: true}

func readPeer(t testing.TB, fd int) []byte {
	t.Helper()
	b := make([]byte, rxBufSize)
	n, err := unix.Read(fd, b)
	require.NoError(t, err)
	return b[:n]
}

func list(pkts ...*stack.PacketBuffer) stack.PacketBufferList {
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(p)
	}
	return l
}

func TestTunWritePackets(t *testing.T) {
	e, peers := pairEndpoint(t, 1, fullOffloads, nil)
	payload := make([]byte, 40000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := outPacket(1000, payload, true)
	defer super.DecRef()
	small := outPacket(1000, []byte("ack"), false)
	defer small.DecRef()
	n, err := e.WritePackets(list(super, small))
	require.Nil(t, err)
	require.Equal(t, 2, n)

	got := readPeer(t, peers[0])
	h, derr := vnet.Decode(got)
	require.NoError(t, derr)
	require.Equal(t, vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, HdrLen: 40, GSOSize: 1000, CsumStart: 20, CsumOffset: 16}, h)
	require.Equal(t, flat(super), got[vnet.HeaderSize:], "header and every view in one write, in order")

	got = readPeer(t, peers[0])
	require.Equal(t, make([]byte, vnet.HeaderSize), got[:vnet.HeaderSize], "a plain packet goes behind an empty header")
	require.Equal(t, flat(small), got[vnet.HeaderSize:])

	s := e.LinkStats()
	require.Equal(t, uint64(2), s.TXPackets)
	require.Equal(t, uint64(super.Size()+small.Size()), s.TXBytes)
	require.Equal(t, uint64(1), s.TXCalls)
	require.Equal(t, uint64(2), s.TXSyscalls)
	require.Equal(t, uint64(1), e.OffloadStats().TXSuperSegments)
}

func TestTunWritePacketsManyViews(t *testing.T) {
	e, peers := pairEndpoint(t, 1, Offloads{}, nil)
	// More views than one write gathers from the stack: written flat.
	pkt := outPacket(1, make([]byte, 100), false)
	defer pkt.DecRef()
	for i := range txIovecs + 10 {
		pkt.Data().AppendView(buffer.NewViewWithData([]byte{byte(i)}))
	}
	n, err := e.WritePackets(list(pkt))
	require.Nil(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, flat(pkt), readPeer(t, peers[0]), "no virtio-net header without offloads")
}

func TestTunWritePacketsSpreadsFlows(t *testing.T) {
	const queues, flows = 4, 64
	e, peers := pairEndpoint(t, queues, Offloads{}, nil)
	where := map[uint16]int{}
	for round := range 3 {
		for f := range flows {
			pkt := outPacket(uint16(10000+f), []byte{byte(round)}, false)
			n, err := e.WritePackets(list(pkt))
			pkt.DecRef()
			require.Nil(t, err)
			require.Equal(t, 1, n)
		}
		used := map[int]bool{}
		for q, fd := range peers {
			for {
				b := make([]byte, 2000)
				n, _, err := unix.Recvfrom(fd, b, unix.MSG_DONTWAIT)
				if errors.Is(err, unix.EAGAIN) {
					break
				}
				require.NoError(t, err)
				sport := uint16(b[20])<<8 | uint16(b[21])
				require.Equal(t, byte(round), b[n-1])
				if prev, ok := where[sport]; ok {
					require.Equal(t, prev, q, "flow %d moved from queue %d to %d", sport, prev, q)
				}
				where[sport] = q
				used[q] = true
			}
		}
		require.Len(t, used, queues, "64 flows use every one of 4 queues")
	}
	require.Len(t, where, flows)
	var total uint64
	for _, s := range e.QueueStats() {
		total += s.TXPackets
	}
	require.Equal(t, uint64(3*flows), total)
}

func TestTunReceiveLoop(t *testing.T) {
	o := DefaultOptions()
	o.RXBatch = 4
	e, peers := pairEndpoint(t, 2, fullOffloads, &o)
	r := linktest.NewSink()
	e.Attach(r)
	require.True(t, e.IsAttached())
	want := map[string]bool{}
	for i := range 20 {
		p := tcp4Packet([]byte(fmt.Sprintf("packet %d", i)), uint16(i))
		want[string(p)] = true
		_, err := unix.Write(peers[i%2], frame(vnet.Header{Flags: vnet.FlagDataValid}, p))
		require.NoError(t, err)
	}
	got := r.Wait(t, 20)
	require.Len(t, got, 20)
	for _, p := range got {
		require.True(t, want[string(p.Data)], "unexpected packet % x", p.Data)
	}
	s := e.LinkStats()
	require.Equal(t, uint64(20), s.RXPackets)
	require.GreaterOrEqual(t, s.RXRounds, uint64(20/4), "rounds of at most 4")
	require.Greater(t, s.RXSyscalls, s.RXPackets, "reads until EAGAIN before parking")

	// Detached: read and dropped, counted.
	e.Attach(nil)
	require.False(t, e.IsAttached())
	_, err := unix.Write(peers[0], frame(vnet.Header{Flags: vnet.FlagDataValid}, tcp4Packet(nil, 1)))
	require.NoError(t, err)
	waitFor(t, func() bool { return e.LinkStats().RXDetached == 1 }, "a packet dropped while detached")

	e.Close()
	e.Close() // idempotent
	p := outPacket(1, nil, false)
	defer p.DecRef()
	n, terr := e.WritePackets(list(p, p))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, terr)
	require.Equal(t, uint64(2), e.LinkStats().TXClosed)
	require.NoError(t, e.Err(), "a closed endpoint is not a failed device")
}

func TestTunCloseRunsActionAndStopsParkedGoroutines(t *testing.T) {
	e, _ := pairEndpoint(t, 3, fullOffloads, nil)
	e.Attach(linktest.NewSink())
	ran := 0
	e.SetOnCloseAction(func() { ran++ })
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: a parked receive goroutine was not woken")
	}
	require.Equal(t, 1, ran)
	e.Close()
	require.Equal(t, 1, ran, "the action runs once")
}

func TestTunReadFailureStopsQueue(t *testing.T) {
	e, peers := pairEndpoint(t, 2, fullOffloads, nil)
	e.Attach(linktest.NewSink())
	// The peer going away makes the socket read end of file, as deleting
	// the device makes a TUN queue read EBADFD: the queue's goroutine must
	// stop (not spin on a descriptor that polls readable forever) and the
	// endpoint must say why.
	unix.Close(peers[0])
	waitFor(t, func() bool { return e.Err() != nil }, "the failure reported")
	require.ErrorIs(t, e.Err(), link.ErrDeviceGone)
	require.ErrorContains(t, e.Err(), "tun pair: the device is gone (read: end of file)")
	reads := e.QueueStats()[0].RXSyscalls
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, reads, e.QueueStats()[0].RXSyscalls, "the stopped queue reads no more")

	// Writes fail at once, dropped and counted.
	p := outPacket(1, nil, false)
	defer p.DecRef()
	n, terr := e.WritePackets(list(p, p))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, terr)
	require.Equal(t, uint64(2), e.LinkStats().TXErrors)
	e.Close() // joins the goroutine of the healthy queue too
}

func TestTunBackpressureAndWritable(t *testing.T) {
	e, peers := pairEndpoint(t, 1, Offloads{}, nil)
	signals := make(chan struct{}, 16)
	e.NotifyWritable(func() { signals <- struct{}{} })
	pkt := outPacket(1, make([]byte, 1000), false)
	defer pkt.DecRef()
	// Write until the peer's queue is full.
	written := 0
	var terr tcpip.Error
	for written < 100000 {
		var n int
		n, terr = e.WritePackets(list(pkt, pkt, pkt, pkt))
		written += n
		if terr != nil {
			break
		}
	}
	require.IsType(t, &tcpip.ErrNoBufferSpace{}, terr, "a full device is backpressure")
	s := e.LinkStats()
	require.Equal(t, uint64(written), s.TXPackets)
	require.NotZero(t, s.TXFull)
	select {
	case <-signals:
		t.Fatal("signalled writable while still full")
	case <-time.After(50 * time.Millisecond):
	}
	// Drain the peer: the watcher must signal.
	for range written {
		readPeer(t, peers[0])
	}
	select {
	case <-signals:
	case <-time.After(10 * time.Second):
		t.Fatal("no writability signal after the peer drained")
	}
	n, terr := e.WritePackets(list(pkt))
	require.Nil(t, terr)
	require.Equal(t, 1, n)
}

func TestTunWriteErrorDropsOnePacket(t *testing.T) {
	e, peers := pairEndpoint(t, 1, Offloads{}, nil)
	// A datagram larger than the socket's send buffer fails with EMSGSIZE:
	// that packet is dropped and reported, the next ones not tried.
	var serr error
	require.NoError(t, e.queues[0].rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	}))
	require.NoError(t, serr)
	big := outPacket(1, make([]byte, 60000), false)
	defer big.DecRef()
	small := outPacket(1, []byte("x"), false)
	defer small.DecRef()
	n, terr := e.WritePackets(list(small, big, small))
	require.Equal(t, 1, n)
	require.NotNil(t, terr)
	require.IsType(t, &tcpip.ErrMessageTooLong{}, terr)
	s := e.LinkStats()
	require.Equal(t, uint64(1), s.TXErrors)
	require.Equal(t, uint64(1), s.TXPackets)
	require.NoError(t, e.Err(), "one bad packet does not fail the device")
	require.Equal(t, flat(small), readPeer(t, peers[0]))
}

// TestWriteAllocs: writing a packet allocates nothing in the endpoint.
func TestTunWriteAllocs(t *testing.T) {
	e, peers := pairEndpoint(t, 2, fullOffloads, nil)
	pkt := outPacket(1, make([]byte, 30000), true)
	defer pkt.DecRef()
	l := list(pkt)
	buf := make([]byte, rxBufSize)
	// One flow: always the same queue.
	q := link.QueueIndex(link.PacketFlowHash(pkt), len(peers))
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := e.WritePackets(l); n != 1 || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
		if _, err := unix.Read(peers[q], buf); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per packet: %.2f", allocs)
	require.Zero(t, allocs)
}

// flat returns a copy of the packet's bytes.
func flat(pkt *stack.PacketBuffer) []byte {
	v := pkt.ToView()
	defer v.Release()
	return append([]byte(nil), v.AsSlice()...)
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkWritePackets measures the TX path over a socketpair (a stand-in
// for the device, whose own cost differs): a 64 KiB super-segment and a
// small packet, per packet.
func BenchmarkTunWritePackets(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
		gso  bool
	}{{"small", 64, false}, {"super-64k", 65000, true}} {
		b.Run(tc.name, func(b *testing.B) {
			e, peers := pairEndpoint(b, 1, fullOffloads, nil)
			require.NoError(b, unix.SetsockoptInt(peers[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20))
			pkt := outPacket(1, make([]byte, tc.size), tc.gso)
			defer pkt.DecRef()
			l := list(pkt)
			buf := make([]byte, rxBufSize)
			b.ReportAllocs()
			b.SetBytes(int64(pkt.Size()))
			start := time.Now()
			for b.Loop() {
				if n, err := e.WritePackets(l); n != 1 || err != nil {
					b.Fatalf("write: %d, %v", n, err)
				}
				if _, err := unix.Read(peers[0], buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/pkt")
		})
	}
}

// BenchmarkTunWritePacketsBatch is BenchmarkTunWritePackets with the
// qdisc's batch (64 small packets per WritePackets call, as one qdisc run
// hands over): what a call costs beyond its writes, per packet.
func BenchmarkTunWritePacketsBatch(b *testing.B) {
	const batch = 64
	e, peers := pairEndpoint(b, 1, fullOffloads, nil)
	require.NoError(b, unix.SetsockoptInt(peers[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20))
	pkt := outPacket(1, make([]byte, 64), false)
	defer pkt.DecRef()
	pkts := make([]*stack.PacketBuffer, batch)
	for i := range pkts {
		pkts[i] = pkt
	}
	l := list(pkts...)
	buf := make([]byte, rxBufSize)
	b.ReportAllocs()
	b.SetBytes(int64(batch * pkt.Size()))
	start := time.Now()
	for b.Loop() {
		if n, err := e.WritePackets(l); n != batch || err != nil {
			b.Fatalf("write: %d, %v", n, err)
		}
		for range batch {
			if _, err := unix.Read(peers[0], buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*batch), "ns/pkt")
}

// outPacket builds an outgoing gVisor packet as IPv4 and TCP would, with
// the payload split over views of the given sizes.
func outPacket(sport uint16, payload []byte, gso bool) *stack.PacketBuffer {
	var data buffer.Buffer
	for off := 0; off < len(payload); {
		n := min(len(payload)-off, 16000)
		data.Append(buffer.NewViewWithData(payload[off : off+n]))
		off += n
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 80, Payload: data})
	tcp := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize))
	tcp.Encode(&header.TCPFields{SrcPort: sport, DstPort: 5001, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck})
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(pkt.Size()), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: dst4, DstAddr: src4})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if gso {
		pkt.GSOOptions = stack.GSO{Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: header.TCPChecksumOffset, MSS: 1000, L3HdrLen: header.IPv4MinimumSize}
	}
	return pkt
}

// detachedEndpoint builds an endpoint over a socketpair whose receive path
// can be driven by hand; the test attaches it without starting the
// receive goroutines (AttachAndStart with a start that does nothing).
func detachedEndpoint(t testing.TB, off Offloads) (*Endpoint, *queue) {
	e, _ := pairEndpoint(t, 1, off, nil)
	return e, e.queues[0]
}

// receiveOne runs a receive round of the one frame b, as the receive
// goroutine's round does around its reads.
func receiveOne(q *queue, b []byte) {
	q.beginRound()
	q.receive(b)
	q.endRound()
}

func TestTunReceive(t *testing.T) {
	e, q := detachedEndpoint(t, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true, USO4: true, USO6: true})
	good := tcp4Packet([]byte("hello"), 1)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	super, h := udpSuper(true, make([]byte, 2500))
	tso := tcp4Packet(make([]byte, 5000), 2)

	receiveOne(q, frame(vnet.Header{}, good))
	require.Equal(t, uint64(1), e.LinkStats().RXDetached, "no dispatcher yet")

	r := linktest.NewSink()
	e.AttachAndStart(r, func() {})                                    // deliver without starting the receive goroutines
	receiveOne(q, frame(vnet.Header{}, good))                         // verified, delivered
	receiveOne(q, frame(vnet.Header{}, bad))                          // bad checksum
	receiveOne(q, frame(vnet.Header{Flags: vnet.FlagDataValid}, bad)) // the kernel's verdict stands
	receiveOne(q, frame(h, super))                                    // USO: three datagrams
	receiveOne(q, frame(vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1000, HdrLen: 40, CsumStart: 20, CsumOffset: 16}, tso))
	receiveOne(q, frame(vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 200, CsumOffset: 16}, good)) // checksum outside
	receiveOne(q, []byte{1, 2, 3})                                                                     // shorter than a header
	receiveOne(q, frame(vnet.Header{Flags: vnet.FlagDataValid}, []byte{0x15, 0}))                      // not IP
	receiveOne(q, make([]byte, rxBufSize))                                                             // truncated read

	got := r.Packets()
	require.Len(t, got, 1+1+3+1)
	require.Equal(t, good, got[0].Data)
	require.Equal(t, bad, got[1].Data)
	require.Equal(t, tso, got[len(got)-1].Data, "a TCP super-segment is delivered whole")
	require.Equal(t, header.IPv6ProtocolNumber, got[2].Proto)

	s := e.LinkStats()
	require.Equal(t, uint64(len(got)), s.RXPackets)
	require.Equal(t, uint64(1), s.RXBadChecksum)
	require.Equal(t, uint64(3), s.RXErrors, "checksum outside, short header, truncated")
	require.Equal(t, uint64(1), s.RXMalformed)
	require.Equal(t, uint64(1), s.RXDetached)
	require.Equal(t, OffloadStats{RXSuperSegments: 1, RXUSOSplit: 1, RXUSODatagrams: 3}, e.OffloadStats())
}

// TestTunReceiveWithoutVNetHeader: without the header, GRO (the default)
// makes the endpoint verify checksums and claim the offload; with NoGRO
// gVisor verifies them and the endpoint claims nothing.
func TestTunReceiveWithoutVNetHeader(t *testing.T) {
	for _, nogro := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoGRO=%v", nogro), func(t *testing.T) {
			e, _ := pairEndpoint(t, 1, Offloads{}, &Options{NoGRO: nogro})
			q := e.queues[0]
			r := linktest.NewSink()
			e.AttachAndStart(r, func() {}) // deliver without starting the receive goroutines
			good := tcp4Packet([]byte("x"), 1)
			bad := bytes.Clone(good)
			bad[len(bad)-1] ^= 1
			receiveOne(q, good)
			receiveOne(q, bad)
			got := r.Packets()
			require.Equal(t, good, got[0].Data)
			if nogro {
				require.Len(t, got, 2, "gVisor verifies")
				require.Equal(t, bad, got[1].Data)
				require.Equal(t, stack.CapabilityNone, e.Capabilities())
			} else {
				require.Len(t, got, 1, "the endpoint verifies")
				require.Equal(t, uint64(1), e.LinkStats().RXBadChecksum)
				require.Equal(t, stack.CapabilityRXChecksumOffload, e.Capabilities())
			}
			require.Equal(t, stack.GVisorGSOSupported, e.SupportedGSO())
		})
	}
}

// TestTunGRO: the segments one round reads are coalesced; a round never
// holds one back for the next. On a TAP device GRO sees the IP packets
// behind the frames' Ethernet header, and the coalesced packet keeps the
// first frame's.
func TestTunGRO(t *testing.T) {
	for _, tap := range []bool{false, true} {
		for _, nogro := range []bool{false, true} {
			t.Run(fmt.Sprintf("TAP=%v/NoGRO=%v", tap, nogro), func(t *testing.T) {
				o := &Options{NoGRO: nogro}
				wire := func(ip []byte) []byte { return ip }
				if tap {
					o = tapOptions(o)
					wire = func(ip []byte) []byte { return ethFrame(ustackMAC, header.IPv4ProtocolNumber, ip) }
				}
				e, peers := pairEndpoint(t, 1, Offloads{}, o)
				q := e.queues[0]
				r := linktest.NewSink()
				e.AttachAndStart(r, func() {}) // rounds by hand
				const n, size = 4, 1000
				for i := range n {
					_, err := unix.Write(peers[0], wire(tcp4Seq(make([]byte, size), uint32(1+i*size))))
					require.NoError(t, err)
				}
				require.NoError(t, q.rc.Control(func(fd uintptr) {
					k, again, err := q.roundLocked(fd)
					require.NoError(t, err)
					require.False(t, again)
					require.Equal(t, n, k)
				}))
				got := r.Packets()
				if nogro {
					require.Len(t, got, n)
					return
				}
				require.Len(t, got, 1, "one round, one flow: one packet")
				require.Len(t, got[0].Payload, header.IPv4MinimumSize+header.TCPMinimumSize+n*size)
				if tap {
					require.Equal(t, ethHeader(header.IPv4ProtocolNumber), got[0].LinkHeader)
				}
				require.Equal(t, uint64(n), e.LinkStats().RXPackets, "RXPackets counts what was read")
			})
		}
	}
}

func TestTunCapabilities(t *testing.T) {
	e, _ := detachedEndpoint(t, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true})
	require.Equal(t, stack.CapabilityRXChecksumOffload, e.Capabilities(), "RX checksum offload, never TX")
	require.Equal(t, stack.HostGSOSupported, e.SupportedGSO())
	require.Equal(t, uint32(HostGSOMaxSize), e.GSOMaxSize())

	e, _ = detachedEndpoint(t, Offloads{VNetHeader: true, Checksum: true})
	require.Equal(t, stack.GVisorGSOSupported, e.SupportedGSO(), "no TSO, no host GSO: gVisor's own")

	o := DefaultOptions()
	e, _ = pairEndpoint(t, 1, Offloads{}, &o)
	require.Equal(t, stack.GVisorGSOSupported, e.SupportedGSO(), "software GSO by default")
	require.Equal(t, uint32(stack.GVisorGSOMaxSize), e.GSOMaxSize())

	none := DefaultOptions()
	none.NoSoftwareGSO = true
	e, _ = pairEndpoint(t, 1, Offloads{}, &none)
	require.Equal(t, stack.GSONotSupported, e.SupportedGSO())
	require.Zero(t, e.GSOMaxSize())

	e, _ = pairEndpoint(t, 1, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true}, &o)
	require.Equal(t, stack.HostGSOSupported, e.SupportedGSO(), "host TSO wins over software GSO")

	require.Equal(t, uint32(DefaultMTU), e.MTU())
	e.SetMTU(100)
	require.Equal(t, uint32(MinMTU), e.MTU())
	e.SetMTU(1 << 20)
	require.Equal(t, uint32(MaxMTU), e.MTU())
	require.Equal(t, header.ARPHardwareNone, e.ARPHardwareType())
}

// FuzzReceive: nothing a device hands over panics the receive path, every
// packet delivered is IP and no larger than what was read, and every frame
// is accounted for.
func FuzzTunReceive(f *testing.F) {
	super, h := udpSuper(false, make([]byte, 2500))
	f.Add(frame(h, super))
	f.Add(frame(vnet.Header{}, tcp4Packet([]byte("seed"), 1)))
	f.Add(frame(vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 100, HdrLen: 40, CsumStart: 20, CsumOffset: 16}, tcp4Packet(make([]byte, 500), 2)))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, q := detachedEndpoint(t, Offloads{VNetHeader: true, Checksum: true, TSO4: true, TSO6: true, USO4: true, USO6: true})
		r := linktest.NewSink()
		e.AttachAndStart(r, func() {}) // deliver without starting the receive goroutines
		receiveOne(q, b)
		for _, pkt := range r.Packets() {
			p := pkt.Data
			if v := header.IPVersion(p); v != header.IPv4Version && v != header.IPv6Version {
				t.Fatalf("delivered a non-IP packet % x", p)
			}
			if len(p) > len(b) {
				t.Fatalf("delivered %d bytes from a %d-byte frame", len(p), len(b))
			}
		}
		// One frame is either dropped with one reason, or delivered as
		// one packet (several for a split UDP super-packet).
		s := e.LinkStats()
		dropped := s.RXErrors + s.RXBadChecksum + s.RXMalformed
		if !(dropped == 1 && s.RXPackets == 0) && !(dropped == 0 && s.RXPackets >= 1) {
			t.Fatalf("frame counted %d times as dropped and delivered as %d packets: %+v", dropped, s.RXPackets, s)
		}
	})
}

// TestTunTXDeviceGone: a write the kernel fails because the device was
// deleted (EBADFD) drops the rest, stops the endpoint, and Err matches
// link.ErrDeviceGone; later writes fail at once.
func TestTunTXDeviceGone(t *testing.T) {
	e, _ := pairEndpoint(t, 1, fullOffloads, nil)
	terr := e.queues[0].refused(3, unix.EBADFD)
	require.IsType(t, &tcpip.ErrClosedForSend{}, terr)
	require.ErrorIs(t, e.Err(), link.ErrDeviceGone)
	require.ErrorIs(t, e.Err(), unix.EBADFD)
	require.ErrorContains(t, e.Err(), "tun pair")

	p := outPacket(1, nil, false)
	defer p.DecRef()
	n, err := e.WritePackets(list(p, p))
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	require.Equal(t, uint64(3+2), e.LinkStats().TXErrors)
}
