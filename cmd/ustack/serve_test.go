package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeStackFlag: -stack picks ustack or the kernel's sockets; the
// kernel takes none of ustack's link and stack flags, and says which were
// given.
func TestServeStackFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "-stack", "bsd"}, `-stack "bsd": want ustack or kernel`},
		{[]string{"serve", "-stack", "kernel", "-link", "afpacket:eth0"}, "-stack kernel: -link configure ustack"},
		{[]string{"serve", "-stack", "kernel", "-qdisc", "llist", "-queues", "2"}, "-stack kernel: -qdisc, -queues configure ustack"},
		{[]string{"serve", "-stack", "kernel", "-addr", "198.18.0.2"}, "-addr"},
		{[]string{"serve", "-stack", "kernel", "-http", "65536"}, "at most 65535"},
		{[]string{"serve", "-stack", "kernel", "-procs", "-1"}, "-procs -1: want a count of CPUs"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(tc.args...)
			require.Equal(t, 2, code)
			require.Empty(t, out)
			require.Contains(t, errs, tc.want)
		})
	}
}

// TestServeProfileFileFails: a -cpuprofile that cannot be created fails
// the command before it serves, naming the flag.
func TestServeProfileFileFails(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")
	code, _, errs := runCmd("serve", "-stack", "kernel", "-echo", "0", "-discard", "0", "-http", "0", "-cpuprofile", bad)
	require.Equal(t, 1, code)
	require.Contains(t, errs, "-cpuprofile")
}
