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

// FuzzParseImpairments: no input panics the parser, and whatever it
// accepts is valid and survives String and a second parse unchanged.
func FuzzParseImpairments(f *testing.F) {
	for _, s := range []string{"", "none", "loss=5%", "loss=0.05,dup=1%,reorder=1%,corrupt=0.1%,delay=1ms,jitter=100us,seed=1",
		"loss=100%", "delay=-1s", "loss=5", "seed=18446744073709551615", "loss=1e-9%", "jitter=1h", ",", "loss=NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		im, err := ParseImpairments(s)
		if err != nil {
			return
		}
		if err := im.Validate(); err != nil {
			t.Fatalf("ParseImpairments(%q) accepted an invalid %+v: %v", s, im, err)
		}
		back, err := ParseImpairments(im.String())
		if err != nil {
			t.Fatalf("String %q of %+v does not parse: %v", im.String(), im, err)
		}
		if im.Active() && back != im {
			t.Fatalf("round trip of %q: %+v then %+v", s, im, back)
		}
	})
}
