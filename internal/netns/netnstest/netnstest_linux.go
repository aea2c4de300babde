package netnstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/netns"
)

// New creates a namespace with netns.New(name) and deletes it when tb
// ends, after the cleanups registered later, failing tb if either fails.
// The caller has checked that it may create namespaces (netns.Probe), so
// that a missing privilege skips tb instead.
func New(tb testing.TB, name string) *netns.NS {
	tb.Helper()
	ns, err := netns.New(name)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, ns.Close(), "delete network namespace %s", ns.Name) })
	return ns
}
