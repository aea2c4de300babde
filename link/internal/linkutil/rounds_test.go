package linkutil

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// roundChecker is a dispatcher that checks that each delivery falls
// inside a transmit round, and passes it on to a recorder.
type roundChecker struct {
	t            *testing.T
	rec          *recorder
	open         bool
	begins, ends int
}

func (c *roundChecker) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if !c.open {
		c.t.Errorf("delivery %d outside a transmit round", c.rec.packets)
	}
	c.rec.DeliverNetworkPacket(proto, pkt)
}

func (*roundChecker) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestGRORoundsWrapDelivery: with SetRounds, a receive round that
// delivers opens one transmit round before its first packet (including
// IPv6, which GRO passes through at once, and a round of IPv6 alone) and
// closes it after Flush delivered the last, of every flow; an empty round
// opens none; without hooks nothing is called; on or off GRO alike.
func TestGRORoundsWrapDelivery(t *testing.T) {
	mixed := groMixedRound()
	var v6 [][]byte
	for _, s := range mixed {
		if header.IPVersion(s) == header.IPv6Version {
			v6 = append(v6, s)
		}
	}
	require.NotEmpty(t, v6)
	for _, c := range []struct {
		name  string
		round [][]byte
	}{{"IPv4 and IPv6 flows", mixed}, {"IPv6 alone", v6}} {
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/gro=%v", c.name, on), func(t *testing.T) {
				rc := &roundChecker{t: t, rec: newRecorder(t)}
				var r Rounds
				var g GRO
				g.Init(on)
				g.SetRounds(&r)
				r.Set(func() { rc.begins++; rc.open = true }, func() { rc.ends++; rc.open = false })
				sent := newRecorder(t)
				for _, s := range c.round {
					sent.record(s)
				}
				deliverRound(&g, rc, c.round)
				require.Equal(t, []int{1, 1}, []int{rc.begins, rc.ends}, "one round: begins, ends")
				require.False(t, rc.open)
				checkRound(t, 0, &g, rc.rec, sent)
				deliverRound(&g, rc, nil)
				require.Equal(t, []int{1, 1}, []int{rc.begins, rc.ends}, "an empty round called the hooks")
				r.Set(nil, nil)
				rc.open = true // no hooks: deliveries are not checked against rounds
				deliverRound(&g, rc, c.round)
				require.Equal(t, []int{1, 1}, []int{rc.begins, rc.ends}, "hooks removed but called")
			})
		}
	}
}
