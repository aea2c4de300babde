package optional_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/internal/optional"
	"github.com/ustack-dev/ustack/link/internal/optional/optionaltest"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/link/pcap"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// wrappers are the wrapper endpoints of the tree, by the package path
// (from the module's root) and name of their type, and how to wrap an
// endpoint in each. TestEveryWrapperIsListed finds them in the source.
var wrappers = map[string]optionaltest.Wrap{
	"link/impair.Endpoint": func(t *testing.T, lower stack.LinkEndpoint) stack.LinkEndpoint {
		w, err := impair.Wrap(lower, nil)
		require.NoError(t, err)
		t.Cleanup(w.Close)
		return w
	},
	"link/pcap.Endpoint": func(t *testing.T, lower stack.LinkEndpoint) stack.LinkEndpoint {
		w, err := pcap.New(lower, io.Discard, nil)
		require.NoError(t, err)
		t.Cleanup(w.Close)
		return w
	},
}

// TestEveryWrapperIsTransparent: every wrapper passes every optional
// interface through.
func TestEveryWrapperIsTransparent(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(wrappers)) {
		t.Run(name, func(t *testing.T) { optionaltest.Transparent(t, wrappers[name]) })
	}
}

// TestEveryWrapperIsListed finds the wrapper endpoints in the module's
// source, so that a new one cannot miss TestEveryWrapperIsTransparent: a
// struct type, outside tests, that holds a gVisor stack.LinkEndpoint and
// is one itself (it embeds the one it holds, or has a WritePackets
// method).
func TestEveryWrapperIsListed(t *testing.T) {
	found := findWrappers(t, moduleRoot(t))
	require.Contains(t, found, "link/impair.Endpoint", "the search finds the wrapper it was written against")
	require.ElementsMatch(t, slices.Collect(maps.Keys(wrappers)), found,
		"every wrapper endpoint in the tree is checked by TestEveryWrapperIsTransparent: add the new one to wrappers")
}

// TestDocListsEveryInterface: link/doc.go's list of optional interfaces
// and Interfaces name the same ones, in the same order.
func TestDocListsEveryInterface(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), "link", "doc.go"))
	require.NoError(t, err)
	_, list, ok := strings.Cut(string(doc), "// # Optional interfaces\n")
	require.True(t, ok, "link/doc.go has a section # Optional interfaces")
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^//   - ([A-Za-z.]+):`).FindAllStringSubmatch(list, -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for _, in := range optional.Interfaces {
		want = append(want, strings.TrimPrefix(in.Name, "link."))
	}
	require.Equal(t, want, listed)
}

// TestFeaturedHasEveryInterface: the endpoint the present probes wrap has
// every interface, and the one the absent probes wrap none; every
// interface has a probe and every probe an interface.
func TestFeaturedHasEveryInterface(t *testing.T) {
	featured, bare := reflect.TypeOf(linktest.NewFeatured(nil)), reflect.TypeOf(linktest.NewEndpoint(nil))
	var types []reflect.Type
	for _, in := range optional.Interfaces {
		require.True(t, featured.Implements(in.Type), "linktest.Featured lacks %s", in.Name)
		require.False(t, bare.Implements(in.Type), "linktest.Endpoint has %s", in.Name)
		require.Equal(t, in.Name, strings.TrimPrefix(in.Type.String(), "*"), "Name is the type's name")
		types = append(types, in.Type)
	}
	require.ElementsMatch(t, types, optionaltest.ProbedTypes())
}

// moduleRoot returns the directory of go.mod above the test's.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// findWrappers returns the wrapper endpoints under root as "dir.Type".
func findWrappers(t *testing.T, root string) []string {
	const gstack = "gvisor.dev/gvisor/pkg/tcpip/stack"
	type pkgType struct{ dir, name string }
	holders := map[pkgType]bool{} // types holding a LinkEndpoint: true if embedded
	writers := map[pkgType]bool{} // types with a WritePackets method
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		alias := ""
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == gstack {
				alias = "stack"
				if imp.Name != nil {
					alias = imp.Name.Name
				}
			}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv != nil && decl.Name.Name == "WritePackets" {
					writers[pkgType{dir, receiverName(decl.Recv.List[0].Type)}] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || alias == "" {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, field := range st.Fields.List {
						sel, ok := field.Type.(*ast.SelectorExpr)
						if ok && sel.Sel.Name == "LinkEndpoint" && isIdent(sel.X, alias) {
							k := pkgType{dir, ts.Name.Name}
							holders[k] = holders[k] || len(field.Names) == 0
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	var found []string
	for k, embedded := range holders {
		if embedded || writers[k] {
			found = append(found, k.dir+"."+k.name)
		}
	}
	return found
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// receiverName returns the type name of a method's receiver (T or *T).
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
