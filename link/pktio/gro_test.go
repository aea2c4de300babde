package pktio_test

import (
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/pktio"
)

// sizeRecorder records the sizes of the packets delivered to it.
type sizeRecorder struct{ sizes []int }

func (r *sizeRecorder) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	r.sizes = append(r.sizes, pkt.Size())
}

func (*sizeRecorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestGROMerges checks that a Write is one receive round through the
// shared GRO (linkutil.GRO, whose FuzzGRO checks that coalescing changes
// nothing a receiver learns): three in-order full segments of one flow
// climb the stack as one packet, or as three with NoGRO.
func TestGROMerges(t *testing.T) {
	var segs [][]byte
	for i := range 3 {
		segs = append(segs, tcpSegment(uint32(1000+i*1380), header.TCPFlagAck, make([]byte, 1380)))
	}
	for _, c := range []struct {
		nogro bool
		want  []int
	}{
		{false, []int{header.IPv4MinimumSize + header.TCPMinimumSize + 3*1380}},
		{true, []int{1420, 1420, 1420}},
	} {
		ep, err := pktio.New(&pktio.Options{NoGRO: c.nogro})
		if err != nil {
			t.Fatal(err)
		}
		r := &sizeRecorder{}
		ep.Attach(r)
		if _, err := ep.Write(segs, 0); err != nil {
			t.Fatal(err)
		}
		ep.Close()
		if len(r.sizes) != len(c.want) || r.sizes[0] != c.want[0] {
			t.Errorf("NoGRO %v: delivered packets of %v bytes, want %v", c.nogro, r.sizes, c.want)
		}
	}
}
