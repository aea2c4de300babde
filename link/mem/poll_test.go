package mem

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link/linktest"
)

// TestBusyPollPreferred: while a reader polls, writes leave the receive
// goroutine parked and the reader's rounds deliver, in order; when the
// reader stops, the receive goroutine takes what is left.
func TestBusyPollPreferred(t *testing.T) {
	a, b := pair(t, nil)
	s := linktest.NewSink()
	b.Attach(s)
	// Let the receive goroutine start and park on the empty ring.
	_, err := write(a, 0, 1)
	require.Nil(t, err)
	s.Wait(t, 1)
	waitParked(t, b)
	rounds := b.LinkStats().RXRounds

	b.BusyPollBegin()
	_, err = write(a, 1, 11)
	require.Nil(t, err)
	require.Equal(t, 10, b.Backlog(), "the parked receive goroutine was not woken")
	require.Equal(t, rounds, b.LinkStats().RXRounds)
	require.Equal(t, 10, b.BusyPoll())
	require.Equal(t, 11, s.Len(), "the reader's round delivered")
	require.Zero(t, b.BusyPoll(), "nothing left")

	_, err = write(a, 11, 20)
	require.Nil(t, err)
	require.Equal(t, 9, b.Backlog())
	b.BusyPollEnd()
	got := s.Wait(t, 20)
	for i, p := range got {
		require.Equal(t, uint32(i), seqOf(p.Data), "rounds by reader and goroutine keep ring order")
	}
	st := b.LinkStats()
	require.Equal(t, uint64(1), st.RXBusyPolled)
	require.Equal(t, uint64(20), st.RXPackets)
}

// waitParked waits for e's receive goroutine to park on its empty ring.
func waitParked(t *testing.T, e *Endpoint) {
	require.Eventually(t, func() bool {
		e.rx.mu.Lock()
		defer e.rx.mu.Unlock()
		return e.rx.parked && e.rx.pkts.Len() == 0
	}, 10*time.Second, 100*time.Microsecond)
}

// TestBusyPollWatchdog: packets written while a reader claims to poll but
// does not are delivered once the watchdog calls.
func TestBusyPollWatchdog(t *testing.T) {
	a, b := pair(t, nil)
	s := linktest.NewSink()
	b.Attach(s)
	_, err := write(a, 0, 1)
	require.Nil(t, err)
	s.Wait(t, 1)
	waitParked(t, b)
	b.BusyPollBegin()
	_, err = write(a, 1, 5)
	require.Nil(t, err)
	require.Equal(t, 4, b.Backlog())
	require.True(t, b.BusyPollWatchdog(), "a reader claims to poll")
	s.Wait(t, 5)
	// Still claimed: later packets are delivered by the next call too.
	waitParked(t, b)
	_, err = write(a, 5, 7)
	require.Nil(t, err)
	require.Equal(t, 2, b.Backlog())
	require.True(t, b.BusyPollWatchdog())
	s.Wait(t, 7)
	b.BusyPollEnd()
	require.False(t, b.BusyPollWatchdog(), "no reader claims to poll")
}

// TestBusyPollConcurrent: readers polling while writers write and the
// receive goroutine runs deliver every packet exactly once, in order. The
// test claims to poll from the start (after the receive goroutine parked)
// until past half way and a busy-polled round was seen, so that rounds are
// busy-polled whatever the scheduling: while the claim holds, writes do
// not wake the parked goroutine and only readers deliver. After it the
// readers come and go, and the receive goroutine takes what they leave.
func TestBusyPollConcurrent(t *testing.T) {
	a, b := pair(t, nil)
	s := linktest.NewSink()
	b.Attach(s)
	waitParked(t, b)
	const total = 20000
	b.BusyPollBegin()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.BusyPollBegin()
				for range 10 {
					b.BusyPoll()
				}
				b.BusyPollEnd()
			}
		}()
	}
	claimed := true
	for next := uint32(0); next < total; {
		if claimed && next >= total/2 && b.LinkStats().RXBusyPolled > 0 {
			b.BusyPollEnd()
			claimed = false
		}
		n, _ := write(a, next, min(next+50, total))
		next += uint32(n)
	}
	got := s.Wait(t, total)
	if claimed {
		b.BusyPollEnd()
	}
	close(stop)
	wg.Wait()
	for i, p := range got {
		require.Equal(t, uint32(i), seqOf(p.Data))
	}
	st := b.LinkStats()
	require.Equal(t, uint64(total), st.RXPackets)
	require.Positive(t, st.RXBusyPolled, "with a poll claimed throughout and the goroutine parked, readers delivered")
	t.Logf("rounds %d, of which busy-polled %d", st.RXRounds, st.RXBusyPolled)
}

// TestBusyPollClosed: polling a closed or detached endpoint delivers
// nothing and does not touch released state.
func TestBusyPollClosed(t *testing.T) {
	a, b := pair(t, nil)
	_, err := write(a, 0, 3)
	require.Nil(t, err)
	require.Zero(t, b.BusyPoll(), "not attached")
	s := linktest.NewSink()
	b.Attach(s)
	s.Wait(t, 3)
	b.Close()
	require.Zero(t, b.BusyPoll())
	b.BusyPollBegin()
	b.BusyPollEnd()
	require.False(t, b.BusyPollWatchdog())
}
