package linkutil

import (
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// roundChecker is a dispatcher that records whether each delivery falls
// inside a transmit round.
type roundChecker struct {
	t                 *testing.T
	open              bool
	begins, ends, got int
}

func (c *roundChecker) DeliverNetworkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {
	if !c.open {
		c.t.Errorf("delivery %d outside a transmit round", c.got)
	}
	c.got++
}

func (*roundChecker) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestGRORoundsWrapDelivery: with SetRounds, a receive round that
// delivers opens one transmit round before its first packet (including
// IPv6, which GRO passes through at once) and closes it after Flush
// delivered the last; an empty round opens none; without hooks nothing
// is called; on or off GRO alike.
func TestGRORoundsWrapDelivery(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := &roundChecker{t: t}
		var r Rounds
		var g GRO
		g.Init(on)
		g.SetRounds(&r)
		r.Set(func() { c.begins++; c.open = true }, func() { c.ends++; c.open = false })
		segs := groSegments([]byte{0, 0, 230, 0, 0x05, 0x64, 230, 0, 0x0a, 0xc8, 230, 0})
		deliverRound(&g, c, segs[0])
		if c.begins != 1 || c.ends != 1 || c.got == 0 || c.open {
			t.Fatalf("gro %v: one round of %d segments: %d begins, %d ends, %d delivered, open %v", on, len(segs[0]), c.begins, c.ends, c.got, c.open)
		}
		deliverRound(&g, c, nil)
		if c.begins != 1 || c.ends != 1 {
			t.Fatalf("gro %v: an empty round called the hooks (%d begins, %d ends)", on, c.begins, c.ends)
		}
		r.Set(nil, nil)
		c.open = true // no hooks: deliveries are not checked against rounds
		deliverRound(&g, c, segs[0])
		if c.begins != 1 || c.ends != 1 {
			t.Fatalf("gro %v: hooks removed but called (%d begins, %d ends)", on, c.begins, c.ends)
		}
	}
}
