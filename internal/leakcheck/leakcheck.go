// Package leakcheck runs a package's tests with gVisor's reference leak
// checking on and fails the run if any goroutine or reference-counted
// object (PacketBuffer, buffer chunk) outlives the tests.
package leakcheck

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/refs"
)

// Main is a TestMain body: func TestMain(m *testing.M) { leakcheck.Main(m) }.
// It must run before any packet buffer exists, so that every one of them is
// tracked.
func Main(m *testing.M) {
	refs.SetLeakMode(refs.LeaksPanic)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines outlived the tests: %v\n", err)
			code = 1
		}
		if err := checkRefs(); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkRefs turns gVisor's leak panic into an error.
func checkRefs() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reference-counted objects outlived the tests: %v", r)
		}
	}()
	refs.DoLeakCheck()
	return nil
}
