package depcheck

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/ustack-dev/ustack"

// library is what an embedder imports: these packages, and everything
// under them, must stay lean.
var library = []string{
	module + "/stack/...",
	module + "/link/...",
	module + "/sched/...",
	module + "/poll/...",
	module + "/cache/...",
	module + "/forward/...",
	module + "/sandbox/...",
	module + "/wgnet/...",
	module + "/metrics/family",
}

// forbidden are import path prefixes of the commands' dependencies, with
// the reason each is there.
var forbidden = []struct{ prefix, user string }{
	{"gonum.org/v1/plot", "ustack bench -plot"},
	{"github.com/schollz/progressbar", "ustack bench's progress bar"},
	{"github.com/prometheus/", "ustack serve -metrics"},
}

func isForbidden(pkg string) bool {
	for _, f := range forbidden {
		if strings.HasPrefix(pkg, f.prefix) {
			return true
		}
	}
	return false
}

// goList runs the go command's list with args and returns its output
// lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH to list dependencies")
	cmd := exec.Command(gocmd, append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list %s: %s", strings.Join(args, " "), stderr.String())
	return strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' })
}

// importGraph returns the packages that patterns match and the import
// graph of everything they depend on (tests excluded: an embedder's
// build does not compile our tests).
func importGraph(t *testing.T, patterns ...string) (roots []string, graph map[string][]string) {
	t.Helper()
	roots = goList(t, append([]string{"-e", "-f", "{{.ImportPath}}"}, patterns...)...)
	graph = make(map[string][]string)
	for _, line := range goList(t, append([]string{"-e", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, roots...)...) {
		f := strings.Fields(line)
		graph[f[0]] = f[1:]
	}
	return roots, graph
}

// chains returns, for each forbidden package reachable from roots, the
// shortest import chain that reaches it, as "a -> b -> c".
func chains(roots []string, graph map[string][]string) []string {
	parent := make(map[string]string)
	seen := make(map[string]bool)
	queue := slices.Clone(roots)
	for _, r := range roots {
		seen[r] = true
	}
	var found []string
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if isForbidden(pkg) {
			chain := []string{pkg}
			for p, ok := parent[pkg]; ok; p, ok = parent[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			found = append(found, strings.Join(chain, " -> "))
			continue // what it imports in turn is its own business
		}
		for _, imp := range graph[pkg] {
			if !seen[imp] {
				seen[imp] = true
				parent[imp] = pkg
				queue = append(queue, imp)
			}
		}
	}
	return found
}

func TestLibraryIsLean(t *testing.T) {
	roots, graph := importGraph(t, library...)
	for _, want := range []string{"stack", "sched", "poll", "cache", "link/mem"} {
		require.Contains(t, roots, module+"/"+want, "the library patterns still match %s", want)
	}
	for _, c := range chains(roots, graph) {
		t.Errorf("a library package imports a command's dependency: %s\n"+
			"move the importing code under cmd/ (or a package only commands import)", c)
	}
	for _, f := range forbidden {
		t.Logf("kept out: %s (%s)", f.prefix, f.user)
	}
}

// TestCheckerSeesCommandDeps runs the check on the command, which does
// import what the library must not: it must find it, or the check above
// proves nothing.
func TestCheckerSeesCommandDeps(t *testing.T) {
	roots, graph := importGraph(t, module+"/cmd/ustack")
	found := chains(roots, graph)
	require.NotEmpty(t, found, "the command's dependencies are visible to the check")
	t.Log(strings.Join(found, "\n"))
	for _, c := range found {
		require.True(t, strings.HasPrefix(c, module+"/cmd/ustack -> "), c)
	}
}

func TestChains(t *testing.T) {
	graph := map[string][]string{
		"lib":     {"mid", "fmt"},
		"mid":     {"github.com/prometheus/client_golang/prometheus", "fmt"},
		"other":   {"gonum.org/v1/plot"},
		"fmt":     nil,
		"unknown": {"lib"},
	}
	require.Equal(t, []string{"lib -> mid -> github.com/prometheus/client_golang/prometheus"}, chains([]string{"lib"}, graph))
	require.Empty(t, chains([]string{"fmt"}, graph))
	require.Len(t, chains([]string{"lib", "other"}, graph), 2)
}
