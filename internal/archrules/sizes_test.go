package archrules

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Rooms that stay rooms (issue 40): a package of the module's own code
// (generated code aside) holds at most maxFiles non-test files and
// maxLines non-test lines, and the libvirt façade (backend/libvirt's
// Backend) keeps fewer than maxFacadeMethods methods: a feature that
// needs more gets a sub-package with a narrow interface, not another
// method on the same type.
const (
	maxFiles         = 20
	maxLines         = 2500
	maxFacadeMethods = 40
)

// TestPackageSizes fails naming each package over the bounds, with its
// files and lines, as go build sees them (no build tags).
func TestPackageSizes(t *testing.T) {
	t.Parallel()
	_, pkgs, err := goList("")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range pkgs {
		if strings.HasPrefix(p.Path, "gen/") || len(p.Files) == 0 {
			continue
		}
		lines := 0
		for _, f := range p.Files {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
		checked++
		if len(p.Files) > maxFiles || lines > maxLines {
			t.Errorf("%s: %d files, %d lines; at most %d files and %d lines: move a job into a sub-package (docs/architecture.md)",
				p.Path, len(p.Files), lines, maxFiles, maxLines)
		}
	}
	if checked < 20 {
		t.Fatalf("measured %d packages; the walk is broken", checked)
	}
}

// TestFacadeMethods counts the methods declared on backend/libvirt's
// Backend, exported or not.
func TestFacadeMethods(t *testing.T) {
	t.Parallel()
	_, pkgs, err := goList("")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(pkgs, func(p pkg) bool { return p.Path == "backend/libvirt" })
	if i < 0 {
		t.Fatal("no package backend/libvirt")
	}
	p := pkgs[i]
	var names []string
	fset := token.NewFileSet()
	for _, f := range p.Files {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, methodsOf(file, "Backend")...)
	}
	if len(names) < 10 {
		t.Fatalf("found %d methods of Backend; the parse is broken", len(names))
	}
	if len(names) >= maxFacadeMethods {
		slices.Sort(names)
		t.Errorf("backend/libvirt.Backend has %d methods, want fewer than %d: %s", len(names), maxFacadeMethods, strings.Join(names, " "))
	}
}

// methodsOf lists the methods file declares on typ or *typ.
func methodsOf(file *ast.File, typ string) []string {
	var out []string
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
			continue
		}
		rt := fd.Recv.List[0].Type
		if st, ok := rt.(*ast.StarExpr); ok {
			rt = st.X
		}
		if id, ok := rt.(*ast.Ident); ok && id.Name == typ {
			out = append(out, fd.Name.Name)
		}
	}
	return out
}

// The counter itself: value and pointer receivers count, other types and
// plain functions do not.
func TestMethodsOf(t *testing.T) {
	t.Parallel()
	src := `package p
type Backend struct{}
type other struct{}
func (b *Backend) A() {}
func (b Backend) b() {}
func (o *other) C() {}
func D() {}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := methodsOf(f, "Backend"); !slices.Equal(got, []string{"A", "b"}) {
		t.Fatalf("methodsOf = %v, want [A b]", got)
	}
}
