//go:build linux

// Package integration tests ustack against the real Linux stack, in
// network namespaces the tests build themselves. The tests need root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN): without it they skip and name the
// privilege, and any other failure to set up fails them. A test also
// skips when a tool it drives (iptables, tc, ping, curl) is missing. With
// USTACK_REQUIRE_INTEGRATION=1, as CI runs them, every skip is a failure.
package integration

import (
	"testing"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/sandbox"
)

func TestMain(m *testing.M) {
	// Started inside a sandbox, the test binary is the sandbox's helper
	// (resolv.conf) or one of the sandbox-side programs, not the tests.
	sandbox.Init()
	sandboxChild()
	leakcheck.Main(m)
}
