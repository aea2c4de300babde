package link

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestStatsAddSumsEveryField gives every field of two Stats a distinct
// value and checks that Add sums each one, so that a field added to Stats
// and forgotten in Add fails here.
func TestStatsAddSumsEveryField(t *testing.T) {
	var a, b Stats
	av, bv := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range av.NumField() {
		require.Equal(t, reflect.Uint64, av.Field(i).Kind(), "Stats.%s: Add sums uint64 counters only", av.Type().Field(i).Name)
		av.Field(i).SetUint(uint64(i + 1))
		bv.Field(i).SetUint(uint64(1000 * (i + 1)))
	}
	sum := a
	sum.Add(b)
	sv := reflect.ValueOf(sum)
	for i := range sv.NumField() {
		require.Equal(t, uint64(1001*(i+1)), sv.Field(i).Uint(), "Stats.%s is not summed by Add", sv.Type().Field(i).Name)
	}
}
