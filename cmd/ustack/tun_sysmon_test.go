package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExecWithSysmonTickRestoresEnvironment(t *testing.T) {
	// The execution again: CMD must get $GODEBUG back as it was, set or
	// not, and the marker goes.
	for _, tc := range []struct {
		marker  string
		want    string
		wantSet bool
	}{
		{"=madvdontneed=1", "madvdontneed=1", true},
		{"=", "", true},
		{"", "", false},
	} {
		t.Setenv("GODEBUG", "madvdontneed=1,"+sysmonTickSetting)
		t.Setenv(sysmonTickEnv, tc.marker)
		require.NoError(t, execWithSysmonTick())
		_, marked := os.LookupEnv(sysmonTickEnv)
		require.False(t, marked, "marker %q", tc.marker)
		got, set := os.LookupEnv("GODEBUG")
		require.Equal(t, tc.wantSet, set, "marker %q", tc.marker)
		require.Equal(t, tc.want, got, "marker %q", tc.marker)
	}
}

func TestExecWithSysmonTickOnlyAsCommand(t *testing.T) {
	// A test binary (a program that is not the ustack command) is never
	// executed again.
	require.False(t, asCommand)
	t.Setenv("GODEBUG", "")
	require.NoError(t, execWithSysmonTick())
	_, marked := os.LookupEnv(sysmonTickEnv)
	require.False(t, marked)
}
