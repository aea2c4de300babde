package deadline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// closed reports whether c is closed, waiting up to wait for it.
func closed(c <-chan struct{}, wait time.Duration) bool {
	select {
	case <-c:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	}
}

func TestDeadline(t *testing.T) {
	var d Deadline
	require.False(t, d.IsSet())
	require.False(t, d.Passed())
	require.False(t, closed(d.Done(), 0), "no deadline: never done")

	d.Set(time.Now().Add(-time.Second))
	require.True(t, d.IsSet())
	require.True(t, d.Passed(), "a deadline in the past has passed")
	require.True(t, closed(d.Done(), 0))

	d.Set(time.Now().Add(time.Hour))
	require.False(t, d.Passed(), "moved to the future: not passed")
	require.False(t, closed(d.Done(), 0), "a Set after it passed gives a new channel")

	done := d.Done()
	d.Set(time.Now().Add(10 * time.Millisecond))
	require.True(t, done == d.Done(), "an open channel is kept across Sets: a waiter sees the new deadline")
	require.True(t, closed(done, 10*time.Second), "the timer closes the channel")
	require.True(t, d.Passed())

	d.Set(time.Time{})
	require.False(t, d.IsSet())
	require.False(t, d.Passed())
	require.False(t, closed(d.Done(), 0))
}

// TestDeadlineStop: a stopped deadline's timer never fires, and a
// replaced timer's late firing does not close the new channel.
func TestDeadlineStop(t *testing.T) {
	var d Deadline
	d.Set(time.Now().Add(5 * time.Millisecond))
	c := d.Done()
	d.Stop()
	require.False(t, closed(c, 50*time.Millisecond), "stopped: not closed")

	for range 100 {
		d.Set(time.Now().Add(time.Microsecond))
		d.Set(time.Now().Add(time.Hour))
		require.False(t, closed(d.Done(), 0), "the earlier Set's timer closed the later one's channel")
	}
	d.Stop()
}
