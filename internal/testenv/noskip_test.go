package testenv

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// skipMethods are testing.TB's methods that skip a test.
var skipMethods = []string{"Skip", "Skipf", "SkipNow"}

// directSkips returns where file names a skip method (calls it or takes
// it as a value) on anything but the package imported from testenvPath.
// It reads syntax only: any receiver counts, a testing.T, B or F, a
// testing.TB or a type of the test's own with a method of that name.
func directSkips(fset *token.FileSet, file *ast.File, testenvPath string) []string {
	testenvNames := map[string]bool{}
	for _, imp := range file.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != testenvPath {
			continue
		}
		name := filepath.Base(testenvPath)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		testenvNames[name] = true
	}
	var found []string
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || !slices.Contains(skipMethods, sel.Sel.Name) {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && testenvNames[id.Name] {
			return true
		}
		pos := fset.Position(sel.Sel.Pos())
		found = append(found, fmt.Sprintf("%s:%d: .%s", pos.Filename, pos.Line, sel.Sel.Name))
		return true
	})
	return found
}

// importsTesting reports whether file imports the testing package.
func importsTesting(file *ast.File) bool {
	return slices.ContainsFunc(file.Imports, func(imp *ast.ImportSpec) bool { return imp.Path.Value == `"testing"` })
}

// TestDirectSkips: the check names every direct skip, on any receiver
// and as a method value too, and passes skips through testenv, however
// it is imported.
func TestDirectSkips(t *testing.T) {
	const path = "example.com/m/internal/testenv"
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"t.Skip", `func TestX(t *testing.T) { t.Skip("no") }`, []string{"x_test.go:3: .Skip"}},
		{"t.Skipf", `func TestX(t *testing.T) { t.Skipf("%d", 1) }`, []string{"x_test.go:3: .Skipf"}},
		{"t.SkipNow", `func TestX(t *testing.T) { t.SkipNow() }`, []string{"x_test.go:3: .SkipNow"}},
		{"b.Skip in a benchmark", `func BenchmarkX(b *testing.B) { b.Skip("no") }`, []string{"x_test.go:3: .Skip"}},
		{"f.Skip in a fuzz target", `func FuzzX(f *testing.F) { f.Skip("no") }`, []string{"x_test.go:3: .Skip"}},
		{"a helper's tb", `func need(tb testing.TB) { tb.Skipf("no") }`, []string{"x_test.go:3: .Skipf"}},
		{"a method value", `func TestX(t *testing.T) { skip := t.Skip; skip() }`, []string{"x_test.go:3: .Skip"}},
		{"a field's test", `type s struct{ t *testing.T }; func (v s) f() { v.t.Skip() }`, []string{"x_test.go:3: .Skip"}},
		{"testenv.Skip", `import "example.com/m/internal/testenv"; func TestX(t *testing.T) { testenv.Skip(t, "no") }`, nil},
		{"testenv.SkipUnderRace", `import "example.com/m/internal/testenv"; func TestX(t *testing.T) { testenv.SkipUnderRace(t, "no") }`, nil},
		{"testenv renamed", `import te "example.com/m/internal/testenv"; func TestX(t *testing.T) { te.Skip(t, "no") }`, nil},
		{"another testenv", `import "example.com/other/testenv"; func TestX(t *testing.T) { testenv.Skip(t, "no") }`, []string{"x_test.go:3: .Skip"}},
		{"no skip", `func TestX(t *testing.T) { t.Log("skip") }`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x_test.go", "package x\nimport \"testing\"\n"+tc.src+"\n", parser.SkipObjectResolution)
			require.NoError(t, err)
			require.Equal(t, tc.want, directSkips(fset, f, path))
		})
	}
}

// TestNoDirectSkip walks the module and fails naming every place that
// skips a test other than through this package (Skip, or SkipUnderRace):
// a skip the suite's required mode (RequireEnv) cannot turn into a
// failure. It reads every _test.go file, and every other file that
// imports "testing" (test helper packages), benchmarks and fuzz targets
// included, in every package but this one; like the go command it leaves
// out testdata, vendor, directories whose names start with "." or "_" and
// nested modules.
func TestNoDirectSkip(t *testing.T) {
	root, module := moduleRoot(t)
	self, err := filepath.Abs(".")
	require.NoError(t, err)
	testenvPath := module + "/internal/testenv"
	fset := token.NewFileSet()
	var checked int
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path == self {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(path, "_test.go") && !importsTesting(f) {
			return nil
		}
		checked++
		found = append(found, directSkips(fset, f, testenvPath)...)
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, checked, "no test file under %s", root)
	for _, at := range found {
		rel := at
		if r, err := filepath.Rel(root, at); err == nil {
			rel = r
		}
		t.Errorf("%s: a test skips directly; skip through testenv.Skip (or testenv.SkipUnderRace), so that a required run fails instead", rel)
	}
	t.Logf("%d files checked under %s", checked, root)
}

// moduleRoot returns the directory of the go.mod above the working
// directory (the package's, under go test) and the module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			require.NoError(t, sc.Err())
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the working directory")
		dir = parent
	}
}
