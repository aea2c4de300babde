package linkspec_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/linkspec"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestParseGood(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want linkspec.Spec
	}{
		{"afpacket:eth0", linkspec.Spec{Kind: linkspec.AFPacket, Name: "eth0"}},
		{"afpacket:veth-a.1", linkspec.Spec{Kind: linkspec.AFPacket, Name: "veth-a.1"}},
		{"tun:tun0", linkspec.Spec{Kind: linkspec.Tun, Name: "tun0"}},
		{"tun:tun%d", linkspec.Spec{Kind: linkspec.Tun, Name: "tun%d"}},
		{"tun:abcdefghijklmno", linkspec.Spec{Kind: linkspec.Tun, Name: "abcdefghijklmno"}},
		{"mem", linkspec.Spec{Kind: linkspec.Mem}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := linkspec.Parse(tc.spec)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.spec, got.String(), "String must give back what Parse read")
			require.Equal(t, tc.want.Kind != linkspec.Mem, got.Device())
		})
	}
}

func TestParseBad(t *testing.T) {
	for _, tc := range []struct {
		spec string
		// want are substrings the error must contain, besides the quoted
		// spec: what is wrong, and what is valid.
		want []string
	}{
		{"", []string{"empty kind", linkspec.Usage}},
		{":eth0", []string{"empty kind", linkspec.Usage}},
		{"eth0", []string{`unknown kind "eth0"`, linkspec.Usage}},
		{"veth:eth0", []string{`unknown kind "veth"`, linkspec.Usage}},
		{"AFPACKET:eth0", []string{`unknown kind "AFPACKET"`, linkspec.Usage}},
		{"afpacket", []string{"afpacket needs an interface name", linkspec.Usage}},
		{"afpacket:", []string{"afpacket needs an interface name", linkspec.Usage}},
		{"tun:", []string{"tun needs an interface name", linkspec.Usage}},
		{"tun:abcdefghijklmnop", []string{"not an interface name", "at most 15"}},
		{"tun:a/b", []string{"not an interface name"}},
		{"afpacket:eth0:1", []string{"not an interface name"}},
		{"afpacket:eth 0", []string{"not an interface name"}},
		{"tun:.", []string{"not an interface name"}},
		{"tun:..", []string{"not an interface name"}},
		{"tun:a\x00b", []string{"not an interface name"}},
		{"tun:a\vb", []string{"not an interface name"}},
		{"mem:x", []string{"mem takes no name", linkspec.Usage}},
		{"mem:", []string{"mem takes no name", linkspec.Usage}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := linkspec.Parse(tc.spec)
			require.Error(t, err)
			require.Contains(t, err.Error(), "link "+strconv.Quote(tc.spec), "the error must name the spec")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestOpenMemIsAPair(t *testing.T) {
	_, err := linkspec.Open(linkspec.Spec{Kind: linkspec.Mem}, nil)
	require.ErrorIs(t, err, linkspec.ErrPair)
}

func TestOpenUnknownKind(t *testing.T) {
	_, err := linkspec.Open(linkspec.Spec{Kind: "veth", Name: "x"}, nil)
	require.ErrorContains(t, err, `unknown kind "veth"`)
}

func TestOpenMissingDevice(t *testing.T) {
	// No interface has a name this long, so afpacket must fail, as
	// root or not, and the error must say which link.
	_, err := linkspec.Open(linkspec.Spec{Kind: linkspec.AFPacket, Name: "ustacknosuch0"}, nil)
	require.ErrorContains(t, err, "link afpacket:ustacknosuch0")
}

func TestOpenPair(t *testing.T) {
	a, b, err := linkspec.OpenPair(nil)
	require.NoError(t, err)
	require.NotNil(t, a)
	require.NotNil(t, b)
	a.Close()
	b.Close()
}

func TestOpenPairImpaired(t *testing.T) {
	im := link.Impairments{Loss: 0.5, Corrupt: 0.1, Seed: 1}
	a, b, err := linkspec.OpenPair(&linkspec.Options{Impair: im})
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()
	// Each end impairs what it receives, so both directions get the
	// faults, corruption included.
	for _, ep := range []any{a, b} {
		_, ok := ep.(*impair.Endpoint)
		require.True(t, ok, "each end must be wrapped with the faults")
		_, ok = ep.(link.Reporter)
		require.True(t, ok, "the wrapper must pass the link's counters through")
	}
}

func TestOpenPairBadImpairments(t *testing.T) {
	// An invalid fault set fails, naming the link, and leaves nothing open
	// (leakcheck fails the package on a leaked goroutine).
	_, _, err := linkspec.OpenPair(&linkspec.Options{Impair: link.Impairments{Loss: 2}})
	require.ErrorContains(t, err, "link mem")
	require.False(t, errors.Is(err, linkspec.ErrPair))
}

// FuzzParse: Parse either refuses a spec, naming it, or reads one that
// String gives back unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"afpacket:eth0", "tun:tun0", "mem", "", ":", "mem:", "tun:", "veth:x", "tun:a:b", "afpacket:0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := linkspec.Parse(spec)
		if err != nil {
			require.Contains(t, err.Error(), strconv.Quote(spec))
			return
		}
		require.Equal(t, spec, s.String())
		require.Contains(t, []linkspec.Kind{linkspec.AFPacket, linkspec.Tun, linkspec.Mem}, s.Kind)
	})
}
