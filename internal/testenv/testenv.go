// Package testenv decides, in one place, whether a test that cannot run
// here may skip. Tests that need root, a device or a Debian package skip
// through Skip with the reason; when USTACK_REQUIRE_INTEGRATION is set (CI
// sets it), Skip fails the test instead, so that a suite that cannot run
// is never counted as passed. A test whose claim the race detector itself
// makes untrue skips through SkipUnderRace. No test anywhere else calls
// Skip, Skipf or SkipNow on a testing.T or B itself: TestNoDirectSkip
// enforces it.
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

// SkipUnderRace skips the test when this binary was built with the race
// detector, whether or not Required: for a test whose claim the detector
// itself makes untrue (it makes sync.Pool drop items at random, so an
// allocation count does not hold) and which the run without -race, also
// required, checks. It is no way out for a test that is merely slow
// under -race: that one runs less data (or CI leaves it out by name).
func SkipUnderRace(tb testing.TB, why string) {
	tb.Helper()
	if RaceEnabled {
		tb.Skipf("%s: skipped under the race detector; the run without it checks this", why)
	}
}
