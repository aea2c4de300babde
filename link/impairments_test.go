package link

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseImpairments(t *testing.T) {
	im, err := ParseImpairments("loss=5%,dup=0.01,reorder=1%,corrupt=0.1%,delay=1ms,jitter=100us,seed=42")
	require.NoError(t, err)
	require.InDelta(t, 0.05, im.Loss, 1e-12)
	require.InDelta(t, 0.01, im.Duplicate, 1e-12)
	require.InDelta(t, 0.01, im.Reorder, 1e-12)
	require.InDelta(t, 0.001, im.Corrupt, 1e-12)
	require.Equal(t, time.Millisecond, im.Delay)
	require.Equal(t, 100*time.Microsecond, im.Jitter)
	require.Equal(t, uint64(42), im.Seed)
	again, err := ParseImpairments(im.String())
	require.NoError(t, err)
	require.Equal(t, im, again)

	for _, bad := range []string{"loss", "loss=150%", "loss=x", "wobble=1%", "delay=soon", "seed=-1"} {
		_, err := ParseImpairments(bad)
		require.Error(t, err, bad)
	}
	none, err := ParseImpairments("none")
	require.NoError(t, err)
	require.False(t, none.Active())
	require.Equal(t, "none", none.String())
}
