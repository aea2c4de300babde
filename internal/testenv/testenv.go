// Package testenv decides, in one place, whether a test that cannot run
// here may skip. Tests that need root, a device or a Debian package skip
// through Skip with the reason; when USTACK_REQUIRE_INTEGRATION is set (CI
// sets it), Skip fails the test instead, so that a suite that cannot run
// is never counted as passed.
package testenv

import (
	"os"
	"testing"
)

// RequireEnv is the variable that turns every Skip into a failure: set to
// anything but "" or "0".
const RequireEnv = "USTACK_REQUIRE_INTEGRATION"

// Required reports whether RequireEnv is set.
func Required() bool { v := os.Getenv(RequireEnv); return v != "" && v != "0" }

// Skip skips the test with the reason given, or fails it when Required.
func Skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if Required() {
		tb.Fatalf(format+" (%s is set: a test that cannot run fails)", append(args, RequireEnv)...)
	}
	tb.Skipf(format, args...)
}
