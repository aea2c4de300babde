//go:build linux

package afpacket

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// putSlot lays frame f out in the TPACKET_V2 slot s as the kernel does:
// the tpacket2_hdr, the sockaddr_ll, and the frame at tp_mac (its
// Ethernet header ending at TPACKET_ALIGN(TPACKET2_HDRLEN + 16), behind
// the virtio-net header with vnetHdr), with the status word f.status|USER.
// A frame too large for the slot is cut to fit, as the kernel does.
func putSlot(s []byte, vnetHdr bool, f ringTestFrame) {
	ne := binary.NativeEndian
	vh := 0
	if vnetHdr {
		vh = vnet.HeaderSize
	}
	mac := (tp2HdrLen+sllLen+16+15)&^15 + vh - linkHdrLen
	snap := min(len(f.b)-vh, len(s)-mac)
	copy(s[mac-vh:], f.b[:vh+snap])
	ne.PutUint32(s[tp2Snaplen:], uint32(snap))
	ne.PutUint32(s[tp2Len:], uint32(max(f.wire, len(f.b)-vh)))
	ne.PutUint16(s[tp2Mac:], uint16(mac))
	s[tp2HdrLen+sllPkttype] = f.pt
	ne.PutUint32(s[tp2Status:], f.status|tpStatusUser)
}

func TestParseSlot(t *testing.T) {
	good := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "full"))
	arp := frame(header.ARPProtocolNumber, make([]byte, header.ARPSize))
	for _, vnetHdr := range []bool{false, true} {
		in := func(b []byte) []byte { return ringVnet(vnetHdr, b) }
		for _, tc := range []struct {
			name string
			in   ringTestFrame
			want slotFrame
		}{
			{"whole", ringTestFrame{b: in(good), pt: unix.PACKET_HOST}, slotFrame{b: in(good), pt: unix.PACKET_HOST}},
			{"partial checksum", ringTestFrame{b: in(arp), pt: unix.PACKET_BROADCAST, status: tpStatusCsumNotReady},
				slotFrame{b: in(arp), pt: unix.PACKET_BROADCAST, partial: true}},
			{"cut short", ringTestFrame{b: in(good[:20]), pt: unix.PACKET_HOST, wire: len(good)},
				slotFrame{b: in(good[:20]), pt: unix.PACKET_HOST, truncated: true}},
			{"copied", ringTestFrame{b: in(good), pt: unix.PACKET_MULTICAST, status: tpStatusCopy},
				slotFrame{pt: unix.PACKET_MULTICAST, copied: true}},
		} {
			t.Run(fmt.Sprintf("%s/vnet=%v", tc.name, vnetHdr), func(t *testing.T) {
				s := make([]byte, slotMinSize)
				putSlot(s, vnetHdr, tc.in)
				st := binary.NativeEndian.Uint32(s[tp2Status:])
				got, ok := parseSlot(s, st, vnetHdr)
				require.True(t, ok)
				require.Equal(t, tc.want, got)
			})
		}
	}

	// Offsets or lengths outside the slot, and a slot too short for its
	// headers, are refused.
	s := make([]byte, slotMinSize)
	putSlot(s, true, ringTestFrame{b: withVnet(vnet.Header{}, good)})
	st := binary.NativeEndian.Uint32(s[tp2Status:])
	for name, spoil := range map[string]func(s []byte){
		"snaplen past the slot":    func(s []byte) { binary.NativeEndian.PutUint32(s[tp2Snaplen:], slotMinSize) },
		"tp_mac past the slot":     func(s []byte) { binary.NativeEndian.PutUint16(s[tp2Mac:], slotMinSize+1) },
		"tp_mac inside the header": func(s []byte) { binary.NativeEndian.PutUint16(s[tp2Mac:], tp2HdrLen+sllLen) },
	} {
		b := bytes.Clone(s)
		spoil(b)
		_, ok := parseSlot(b, st, true)
		require.False(t, ok, name)
	}
	_, ok := parseSlot(s[:tp2HdrLen+sllLen-1], st, false)
	require.False(t, ok, "slot shorter than its headers")
}

// FuzzParseSlot: nothing in a slot makes parseSlot index out of range, and
// a frame it passes on lies inside the slot.
func FuzzParseSlot(f *testing.F) {
	good := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "full"))
	for _, vnetHdr := range []bool{false, true} {
		b := good
		if vnetHdr {
			b = withVnet(vnet.Header{}, good)
		}
		s := make([]byte, 256)
		putSlot(s, vnetHdr, ringTestFrame{b: b, wire: 2000})
		f.Add(s, uint32(tpStatusUser), vnetHdr)
		f.Add(s, uint32(tpStatusUser|tpStatusCopy), vnetHdr)
	}
	f.Fuzz(func(t *testing.T, s []byte, status uint32, vnetHdr bool) {
		got, ok := parseSlot(s, status, vnetHdr)
		if !ok || got.copied {
			return
		}
		if len(got.b) > len(s) || (len(got.b) > 0 && !bytes.Contains(s, got.b)) {
			t.Fatalf("frame of %d bytes not inside the %d-byte slot", len(got.b), len(s))
		}
	})
}

// TestSlotGeometry: slots hold a frame of the MTU behind the kernel's
// headers, tile the blocks, and the ring holds about the receive buffer.
func TestSlotGeometry(t *testing.T) {
	for _, tc := range []struct{ mtu, size int }{{1280, 2048}, {1500, 2048}, {1954, 2048}, {1955, 4096}, {9000, 16384}, {65520, 128 << 10}} {
		require.Equal(t, tc.size, slotSizeFor(tc.mtu), "MTU %d", tc.mtu)
		require.LessOrEqual(t, slotHeadroom+linkHdrLen+4+tc.mtu, tc.size, "MTU %d", tc.mtu)
	}
	for _, tc := range []struct{ size, rcvBuf int }{{2048, DefaultRcvBuf}, {2048, MinRcvBuf}, {16384, DefaultRcvBuf}, {128 << 10, MinRcvBuf}} {
		bs, blocks := slotGeometry(tc.size, tc.rcvBuf)
		require.Zero(t, bs%tc.size, "slots tile a block")
		require.Zero(t, bs%4096, "a block is whole pages")
		slots := blocks * bs / tc.size
		require.GreaterOrEqual(t, slots, slotMinCount)
		require.GreaterOrEqual(t, slots*tc.size, min(tc.rcvBuf, slotMinCount*tc.size))
		require.Less(t, (slots-bs/tc.size)*tc.size, max(tc.rcvBuf, slotMinCount*tc.size), "no more than a block beyond")
	}
}

// anonRing maps n slots of size bytes of anonymous memory as a queue's
// slot ring, so that the endpoint's Close unmaps it as it would the
// kernel's.
func anonRing(t testing.TB, n, size int) *slotRing {
	mem, err := unix.Mmap(-1, 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	return &slotRing{mem: mem, size: size, slots: n}
}

// TestSlotRingReceives runs a receive round over a slot ring the test
// fills as the kernel would, frames too large for their slots
// queued on the socket (the socketpair's far end plays the kernel): every
// frame reaches the stack intact and in ring order, copied ones with their
// slots' packet types and a run of them read with one recvmmsg, a frame
// cut short or a spoiled slot is counted, and every slot is handed back.
func TestSlotRingReceives(t *testing.T) {
	for _, vnetHdr := range []bool{false, true} {
		t.Run(fmt.Sprintf("vnet=%v", vnetHdr), func(t *testing.T) {
			e, far := testEndpoint(t, &Options{NoOffload: !vnetHdr}, 0)
			q := e.queues[0]
			q.slots = anonRing(t, 8, slotMinSize)
			in := func(b []byte) []byte { return ringVnet(vnetHdr, b) }
			udp := func(i int, n int) []byte {
				return frame(header.IPv4ProtocolNumber, ip4(header.UDPProtocolNumber, uint16(i), 2, bytes.Repeat([]byte{byte(i)}, n), "full"))
			}
			big := udp(2, 3000) // larger than a 2 KiB slot
			bigger := udp(3, 9000)
			slots := []ringTestFrame{
				{b: in(udp(1, 10)), pt: unix.PACKET_HOST},
				{b: in(big), pt: unix.PACKET_MULTICAST, status: tpStatusCopy},
				{b: in(bigger), pt: unix.PACKET_HOST, status: tpStatusCopy},
				{b: in(udp(4, 10)), pt: unix.PACKET_BROADCAST},
				{b: in(udp(5, 3000)), pt: unix.PACKET_HOST}, // not copied: cut short
				{b: in(udp(6, 10)), pt: unix.PACKET_HOST},   // spoiled below
				{b: in(udp(7, 10)), pt: unix.PACKET_HOST},
			}
			for i, f := range slots {
				putSlot(q.slots.mem[i*slotMinSize:(i+1)*slotMinSize], vnetHdr, f)
			}
			binary.NativeEndian.PutUint32(q.slots.mem[5*slotMinSize+tp2Snaplen:], slotMinSize)
			for _, b := range [][]byte{big, bigger} {
				_, err := unix.Write(far[0], in(b))
				require.NoError(t, err)
			}
			s := linktest.NewSink()
			e.AttachAndStart(s, func() {}) // the round by hand
			q.gate.Owner.Lock()
			var n int
			var more bool
			var errno unix.Errno
			require.NoError(t, q.rc.Control(func(fd uintptr) { n, more, errno = q.slotRound(int(fd)) }))
			q.gate.Owner.Unlock()
			require.Equal(t, len(slots), n)
			require.False(t, more)
			require.Zero(t, errno)
			got := s.Wait(t, 5)
			require.Len(t, got, 5)
			for i, want := range []struct {
				port int
				f    []byte
				pt   tcpip.PacketType
			}{{1, udp(1, 10), tcpip.PacketHost}, {2, big, tcpip.PacketMulticast}, {3, bigger, tcpip.PacketHost}, {4, udp(4, 10), tcpip.PacketBroadcast}, {7, udp(7, 10), tcpip.PacketHost}} {
				require.Equal(t, want.f[linkHdrLen:], got[i].Payload, "frame %d intact, in order", i)
				require.Equal(t, want.pt, got[i].PktType, "frame %d's packet type", i)
			}
			st := e.LinkStats()
			require.Equal(t, uint64(2), st.RXErrors, "the cut and the spoiled slot counted")
			require.Equal(t, uint64(5), st.RXPackets)
			require.Equal(t, uint64(1), st.RXRounds, "seven slots, one round")
			require.Equal(t, uint64(1), st.RXSyscalls, "one recvmmsg for the run of two copies")
			for i := range slots {
				require.Zero(t, binary.NativeEndian.Uint32(q.slots.mem[i*slotMinSize:]), "slot %d handed back", i)
			}
			require.Equal(t, len(slots), q.slots.next)
		})
	}
}

// slotSegments fills n slots of r with full-sized in-order TCP segments of
// one flow, without virtio-net headers, and returns a function that hands
// them to the reader again, as the kernel would with new frames, and runs
// a receive round on them.
func slotSegments(q *queue, r *slotRing, n int) func() int {
	q.slots = r
	for i := range n {
		f := frame(header.IPv4ProtocolNumber, tcpSeq4(uint32(i*1448), make([]byte, 1448)))
		putSlot(r.mem[i*r.size:(i+1)*r.size], false, ringTestFrame{b: f, pt: unix.PACKET_HOST})
	}
	return func() int {
		for i := range n {
			slotStatus(r.mem[i*r.size:]).Store(tpStatusUser)
		}
		r.next = 0
		q.gate.Owner.Lock()
		defer q.gate.Owner.Unlock()
		got, _, _ := q.slotRound(-1)
		return got
	}
}

// TestSlotRoundAllocs: a slot-ring round allocates nothing once warm, and
// GRO makes one packet of one flow's segments.
func TestSlotRoundAllocs(t *testing.T) {
	testenv.SkipUnderRace(t, "the race detector makes gVisor's sync.Pools drop items at random")
	e, _ := testEndpoint(t, &Options{NoOffload: true}, 0)
	c := &linktest.Counter{}
	e.AttachAndStart(c, func() {})
	q := e.queues[0]
	round := slotSegments(q, &slotRing{mem: make([]byte, 40*slotMinSize), size: slotMinSize, slots: 40}, 40)
	defer func() { q.slots = nil }() // not a mapping: nothing for Close to unmap
	require.Equal(t, 40, round())
	require.Equal(t, uint64(1), c.Count(), "packets up the stack from 40 segments")
	require.Zero(t, testing.AllocsPerRun(100, func() { round() }), "allocations per slot-ring round")
	require.Equal(t, link.Stats{}.RXSyscalls, e.LinkStats().RXSyscalls, "no system call")
}
