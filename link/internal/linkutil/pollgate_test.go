package linkutil

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func rearmed(g *PollGate) bool {
	select {
	case <-g.Rearmed():
		return true
	default:
		return false
	}
}

// TestPollGate: the receive goroutine defers while readers poll, is
// re-armed by the last one to stop, by the watchdog and by Force, and a
// forced round ends with Received.
func TestPollGate(t *testing.T) {
	var g PollGate
	require.False(t, g.Deferring())
	g.Begin()
	g.Begin()
	require.True(t, g.Deferring())
	g.End()
	require.True(t, g.Deferring(), "one reader still polls")
	require.False(t, rearmed(&g))
	g.End()
	require.False(t, g.Deferring())
	require.True(t, rearmed(&g), "the last reader re-armed the goroutine")

	require.False(t, g.Watchdog(), "nobody polls: nothing to re-arm")
	g.Begin()
	require.True(t, g.Watchdog())
	require.False(t, g.Deferring(), "forced: the goroutine runs a round")
	require.True(t, rearmed(&g))
	g.Received()
	require.True(t, g.Deferring(), "after its round it defers again")
	g.Force()
	require.False(t, g.Deferring())
	g.Received()
	g.End()
	require.False(t, g.Deferring())

	g.CountPolled()
	g.CountPolled()
	require.Equal(t, uint64(2), g.Polled())
}

// TestPollGates: a reader begins and ends on every queue's gate, and the
// watchdog reports readers on any; the receive goroutine's WaitTurn waits
// for its turn or for stop.
func TestPollGates(t *testing.T) {
	var a, b PollGate
	gs := PollGates{&a, &b}
	gs.Begin()
	require.True(t, a.Deferring())
	require.True(t, b.Deferring())
	require.True(t, gs.Watchdog())
	a.Received()
	b.Received()
	turn := make(chan bool, 1)
	go func() { turn <- a.WaitTurn(nil) }()
	gs.End()
	require.True(t, <-turn, "the last reader gave the goroutine its turn")
	require.False(t, gs.Watchdog())

	b.Begin()
	stop := make(chan struct{})
	close(stop)
	for rearmed(&b) {
	}
	require.False(t, b.WaitTurn(stop), "stop ends the wait")
	b.End()
	require.True(t, b.WaitTurn(stop), "not deferring: its turn at once")
}
