// Package leakcheck runs a package's tests with gVisor's reference leak
// checking on and fails the run if any goroutine or reference-counted
// object (PacketBuffer, buffer chunk) outlives the tests. Settled checks
// the same at a point inside a test, so that a leak names the test that
// made it rather than the whole binary.
//
// gVisor's refs package tracks which objects are alive, not where they
// came from: it logs the stack of each reference event only when the
// type's generated enableLogging constant is true (for packet buffers,
// packetBufferenableLogging in gvisor.dev/gvisor/pkg/tcpip/stack). To
// find where leaked objects were made, copy the gVisor module out of the
// module cache, set that constant (or record refs.RecordStack in
// InitRefs, IncRef and DecRef) in the copy, and run the failing test with
// GOWORK pointing at a go.work file outside the repository that uses the
// repository and replaces gvisor.dev/gvisor with the copy.
package leakcheck

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
		if l := live(nil); l.total > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: reference-counted objects outlived the tests: %v\n", l)
			code = 1
		}
	}
	os.Exit(code)
}

// Settling bounds how long Settled waits for objects to be released: a
// stack's goroutines may drop their last references just after the
// Close that stopped them returns. It is a bound on a wait, not a timing
// the test asserts.
const Settling = 2 * time.Second

// Settled fails tb if a reference-counted object is still alive once
// Settling has passed without all of them being released. Call it where
// the test has closed everything it opened, in a binary whose TestMain is
// Main and where no other test runs at the same time (not from parallel
// tests): every object alive then is this test's leak. Objects an
// earlier Settled already reported are not reported again, so that one
// leak fails one test (Main's check at the end still counts them).
func Settled(tb testing.TB) {
	tb.Helper()
	if refs.GetLeakMode() != refs.LeaksPanic {
		tb.Fatal("leakcheck: reference leak checking is off: make the package's TestMain call leakcheck.Main")
		return
	}
	deadline := time.Now().Add(Settling)
	reportedMu.Lock()
	defer reportedMu.Unlock()
	for {
		l := live(reported)
		for id := range reported {
			if !l.alive[id] {
				delete(reported, id)
			}
		}
		if l.total == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, id := range l.ids {
				reported[id] = true
			}
			tb.Fatalf("leakcheck: reference-counted objects outlived the test: %v", l)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reported holds the objects Settled has reported and that are still
// alive, by refs' "[type pointer]" identity (dropped once freed, as the
// pointer may then be reused).
var (
	reportedMu sync.Mutex
	reported   = make(map[string]bool)
)

// leaks is what refs' leak check found alive, but the objects it was
// told to skip: how many objects of each type, their identities, and the
// lines of the check's own report that name them; alive holds every
// object alive, skipped ones included.
type leaks struct {
	total  int
	byType map[string]int
	ids    []string
	report string
	alive  map[string]bool
}

// reportLines bounds how much of refs' report (one line per object, tens
// of thousands for a leak on a per-packet path) String repeats.
const reportLines = 20

// String sums the leak up by type, most numerous first, and quotes the
// start of refs' report.
func (l leaks) String() string {
	types := slices.SortedFunc(maps.Keys(l.byType), func(a, b string) int {
		if d := l.byType[b] - l.byType[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d alive (", l.total)
	for i, t := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", l.byType[t], t)
	}
	b.WriteString(")\n")
	lines := strings.SplitAfter(l.report, "\n")
	if len(lines) > reportLines {
		lines = append(lines[:reportLines], fmt.Sprintf("... and %d more lines\n", len(lines)-reportLines))
	}
	b.WriteString(strings.Join(lines, ""))
	return b.String()
}

// live runs refs' leak check now, turning its panic into a count of the
// objects alive but those in skip. Its report has one line per object
// alive, "[type pointer] reference count of N instead of 0".
func live(skip map[string]bool) (l leaks) {
	l.byType = make(map[string]int)
	l.alive = make(map[string]bool)
	var report string
	func() {
		defer func() {
			if r := recover(); r != nil {
				report = fmt.Sprint(r)
			}
		}()
		refs.DoRepeatedLeakCheck()
	}()
	var kept strings.Builder
	for _, line := range strings.Split(report, "\n") {
		id, _, ok := strings.Cut(line, "]")
		if !strings.HasPrefix(line, "[") || !ok {
			continue
		}
		l.alive[id] = true
		if skip[id] {
			continue
		}
		typ, _, _ := strings.Cut(id[1:], " ")
		l.byType[typ]++
		l.ids = append(l.ids, id)
		l.total++
		kept.WriteString(line + "\n")
	}
	l.report = kept.String()
	if l.total == 0 && report != "" && !strings.HasPrefix(report, "Leak checking detected") {
		// A report refs worded differently: count it as one, so that it
		// is never mistaken for a clean check.
		l.byType["(unparsed refs report)"]++
		l.total = 1
		l.report = report
	}
	return l
}
