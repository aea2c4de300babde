//go:build linux

package afpacket

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/internal/testenv"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/vnet"
)

// ringTestFrame is one frame for buildBlock: the bytes recvmmsg would have
// read (behind a virtio-net header if the block has them), its packet
// type, its length on the wire (more than len(b): cut short) and its
// status word.
type ringTestFrame struct {
	b      []byte
	pt     uint8
	wire   int
	status uint32
}

// buildBlock lays frames out in a TPACKET_V3 block as the kernel does:
// the descriptor, then each frame's tpacket3_hdr and sockaddr_ll, the
// frame at an aligned tp_mac (the virtio-net header just before it), and
// tp_next_offset chaining them.
func buildBlock(size int, vnetHdr bool, frames []ringTestFrame) []byte {
	blk := make([]byte, size)
	ne := binary.NativeEndian
	vh := 0
	if vnetHdr {
		vh = vnet.HeaderSize
	}
	off := blkDescLen
	ne.PutUint32(blk[blkFirstPkt:], uint32(off))
	ne.PutUint32(blk[blkNumPkts:], uint32(len(frames)))
	for i, f := range frames {
		h := blk[off:]
		mac := (tp3HdrLen+sllLen+vh+15)&^15 + 2 // as the kernel's netoff - maclen
		snap := len(f.b) - vh
		copy(h[mac-vh:], f.b)
		ne.PutUint32(h[tp3Snaplen:], uint32(snap))
		ne.PutUint32(h[tp3Len:], uint32(max(f.wire, snap)))
		ne.PutUint32(h[tp3Status:], f.status)
		ne.PutUint16(h[tp3Mac:], uint16(mac))
		h[tp3HdrLen+sllPkttype] = f.pt
		next := (mac + snap + 15) &^ 15
		if i < len(frames)-1 {
			ne.PutUint32(h[tp3Next:], uint32(next))
		}
		off += next
	}
	ne.PutUint32(blk[blkLen:], uint32(off))
	ne.PutUint32(blk[blkStatus:], tpStatusUser)
	return blk
}

// ringVnet returns the frame b as a ring holds it: behind a virtio-net
// header (checksum valid) with vnetHdr.
func ringVnet(vnetHdr bool, b []byte) []byte {
	if vnetHdr {
		return withVnet(vnet.Header{Flags: vnet.FlagDataValid}, b)
	}
	return b
}

type walked struct {
	b                  []byte
	pt                 uint8
	truncated, partial bool
}

func walkAll(blk []byte, vnetHdr bool) ([]walked, int, int) {
	var got []walked
	n, bad := walkBlock(blk, vnetHdr, func(b []byte, pt uint8, truncated, partial bool) {
		got = append(got, walked{bytes.Clone(b), pt, truncated, partial})
	})
	return got, n, bad
}

func TestWalkBlock(t *testing.T) {
	good := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "full"))
	arp := frame(header.ARPProtocolNumber, make([]byte, header.ARPSize))
	for _, vnetHdr := range []bool{false, true} {
		in := func(b []byte) []byte { return ringVnet(vnetHdr, b) }
		frames := []ringTestFrame{
			{b: in(good), pt: unix.PACKET_HOST},
			{b: in(arp), pt: unix.PACKET_BROADCAST, status: tpStatusCsumNotReady},
			{b: in(good[:20]), pt: unix.PACKET_HOST, wire: len(good)},
		}
		got, n, bad := walkAll(buildBlock(ringBlockSize, vnetHdr, frames), vnetHdr)
		require.Equal(t, 3, n)
		require.Zero(t, bad)
		require.Equal(t, []walked{
			{in(good), unix.PACKET_HOST, false, false},
			{in(arp), unix.PACKET_BROADCAST, false, true},
			{in(good[:20]), unix.PACKET_HOST, true, false},
		}, got)
	}

	// A frame that claims to reach past the block ends the walk.
	blk := buildBlock(ringBlockSize, false, []ringTestFrame{{b: good}, {b: arp}})
	second := blkDescLen + int(binary.NativeEndian.Uint32(blk[blkDescLen+tp3Next:]))
	binary.NativeEndian.PutUint32(blk[second+tp3Snaplen:], ringBlockSize)
	got, n, bad := walkAll(blk, false)
	require.Equal(t, 1, n)
	require.Equal(t, 1, bad)
	require.Len(t, got, 1)

	// More frames counted than chained.
	blk = buildBlock(ringBlockSize, false, []ringTestFrame{{b: good}})
	binary.NativeEndian.PutUint32(blk[blkNumPkts:], 3)
	_, n, bad = walkAll(blk, false)
	require.Equal(t, 1, n)
	require.Equal(t, 2, bad)
}

// FuzzWalkBlock: nothing in a block makes walkBlock index out of range,
// and it counts what it passed on.
func FuzzWalkBlock(f *testing.F) {
	good := frame(header.IPv4ProtocolNumber, ip4(header.TCPProtocolNumber, 1, 2, []byte("hello"), "full"))
	for _, vnetHdr := range []bool{false, true} {
		b := good
		if vnetHdr {
			b = withVnet(vnet.Header{}, good)
		}
		f.Add(buildBlock(512, vnetHdr, []ringTestFrame{{b: b}, {b: b, wire: 2000}}), vnetHdr)
	}
	f.Fuzz(func(t *testing.T, blk []byte, vnetHdr bool) {
		calls := 0
		n, bad := walkBlock(blk, vnetHdr, func([]byte, uint8, bool, bool) { calls++ })
		if n != calls || bad < 0 {
			t.Fatalf("walked %d frames, %d bad, passed on %d", n, bad, calls)
		}
	})
}

// TestRingGeometry: a ring holds as much as the receive buffer it stands
// for, a 64 KiB super-packet fits one of its blocks, and it has a few.
func TestRingGeometry(t *testing.T) {
	require.Equal(t, DefaultRcvBuf/ringBlockSize, blocksFor(DefaultRcvBuf))
	require.Equal(t, ringMinBlocks, blocksFor(MinRcvBuf))
	require.Greater(t, ringBlockSize-blkDescLen-tp3HdrLen-sllLen-16, linkHdrLen+maxIPPacket)
	require.Zero(t, ringBlockSize%ringFrameSize)
}

// segmentBlock builds a ring block of n full-sized in-order TCP segments
// of one flow, without virtio-net headers.
func segmentBlock(n int) []byte {
	frames := make([]ringTestFrame, n)
	for i := range frames {
		frames[i] = ringTestFrame{b: frame(header.IPv4ProtocolNumber, tcpSeq4(uint32(i*1448), make([]byte, 1448))), pt: unix.PACKET_HOST}
	}
	return buildBlock(ringBlockSize, false, frames)
}

// ringRoundOn gives q a one-block ring over blk and returns a function
// that runs a receive round on it, handing the block back to the
// reader's side first, as the kernel would with new frames.
func ringRoundOn(q *queue, blk []byte) func() int {
	q.ring = &ring{mem: blk, blocks: 1}
	q.ringFrame = q.receive
	return func() int {
		blockStatus(blk).Store(tpStatusUser)
		q.gate.Owner.Lock()
		defer q.gate.Owner.Unlock()
		got, ok := q.ring.ready()
		if !ok {
			panic("block not ready")
		}
		return q.ringBlock(got)
	}
}

// TestRingRoundAllocs: a ring round allocates nothing once warm, with GRO
// and without, and GRO makes one packet of a block of one flow's
// segments.
func TestRingRoundAllocs(t *testing.T) {
	testenv.SkipUnderRace(t, "the race detector makes gVisor's sync.Pools drop items at random")
	for _, nogro := range []bool{false, true} {
		e, _ := testEndpoint(t, &Options{NoOffload: true, NoGRO: nogro}, 0)
		c := &linktest.Counter{}
		e.AttachAndStart(c, func() {})
		round := ringRoundOn(e.queues[0], segmentBlock(40))
		require.Equal(t, 40, round())
		want := uint64(1)
		if nogro {
			want = 40
		}
		require.Equal(t, want, c.Count(), "packets up the stack from one block (NoGRO %v)", nogro)
		allocs := testing.AllocsPerRun(100, func() { round() })
		require.Zero(t, allocs, "allocations per ring round (NoGRO %v)", nogro)
		e.queues[0].ring = nil // not a mapping: nothing for Close to unmap
	}
}

// BenchmarkRXRound measures one receive round of 64 full-sized segments of
// one flow, without the virtio-net header, up to a dispatcher that counts
// them: from a TPACKET_V3 block, from TPACKET_V2 slots and from a recvmmsg
// landing batch (frames already in place: the system calls are not
// measured), with GRO on and off.
func BenchmarkRXRound(b *testing.B) {
	const n = 64
	for _, mode := range []string{"recvmmsg", "ring", "slotring"} {
		for _, nogro := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/gro=%v", mode, !nogro), func(b *testing.B) {
				e, _ := testEndpoint(b, &Options{NoOffload: true, NoGRO: nogro, RXBatch: n}, 0)
				c := &linktest.Counter{}
				e.AttachAndStart(c, func() {})
				q := e.queues[0]
				var round func() int
				switch mode {
				case "ring":
					round = ringRoundOn(q, segmentBlock(n))
					defer func() { q.ring = nil }()
				case "slotring":
					round = slotSegments(q, &slotRing{mem: make([]byte, n*slotMinSize), size: slotMinSize, slots: n}, n)
					defer func() { q.slots = nil }()
				default:
					r := newRXBatch(n, true)
					f := frame(header.IPv4ProtocolNumber, tcpSeq4(0, make([]byte, 1448)))
					for i := range n {
						seg := frame(header.IPv4ProtocolNumber, tcpSeq4(uint32(i*1448), make([]byte, 1448)))
						copy(r.slab[i*rxBufSize:], seg)
						r.msgs[i].Len = uint32(len(f))
					}
					round = func() int {
						q.gate.Owner.Lock()
						defer q.gate.Owner.Unlock()
						q.deliver(r, n)
						return n
					}
				}
				b.ReportAllocs()
				b.SetBytes(n * 1514)
				for b.Loop() {
					round()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
				b.ReportMetric(float64(c.Count())/float64(b.N), "delivered/round")
			})
		}
	}
}
