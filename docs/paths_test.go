package docs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A repository path written as code in README.md or docs/*.md must exist,
// so a moved or deleted file cannot leave the docs pointing at nothing.
// What counts as a path: a code span of path characters that starts with a
// top-level directory of the repository ("server/lifecycle/run.go",
// "test/soak/"), names a top-level file ("Makefile"), or is a bare file
// name with a source extension ("hosts.go", which must then exist
// somewhere in the repository). Code spans that are identifiers
// (record.Error), commands (make test) or examples are not paths.

var (
	pathChars = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)
	// A bare file name of the sources or scripts ("hosts.go", "check.sh").
	bareFile   = regexp.MustCompile(`^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*\.(go|sh|proto|mk|ts|tsx|js|json|yaml|yml|md|txt|tsv|html|css)$`)
	lineSuffix = regexp.MustCompile(`:\d+(-\d+)?$`)
)

// notAPath: spans that look like paths but are examples or run-time
// paths, not files of the repository: placeholders (FILE, <x>, *), paths
// outside the tree (/run/…, ~/…), and build outputs that a clean clone
// has not made yet (bin/, out/, web/node_modules).
func notAPath(s string) bool {
	for _, marker := range []string{"FILE", "<", ">", "*", "$", "{", "…", "...", "NNN", "XXX"} {
		if strings.Contains(s, marker) {
			return true
		}
	}
	for _, prefix := range []string{"/", "~", "./bin/", "bin/", "out/", "web/node_modules", "http:", "https:"} {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// examples are the code spans of the docs that look like files of the
// repository and are not, each with why.
var examples = map[string]string{
	"packages.tsv":       "written by make golden-image beside the image it built",
	"values-rack-a.yaml": "the operator's own Helm values file",
	"util.json":          "a libvirt log filter, not a file",
}

// repoIndex is what the checker needs of the tree: the top-level entries
// and every file's base name.
type repoIndex struct {
	root  string
	top   map[string]bool // top-level names ("server", "Makefile")
	names map[string]bool // base names of every file
}

func indexRepo(t *testing.T, root string) repoIndex {
	t.Helper()
	ix := repoIndex{root: root, top: map[string]bool{}, names: map[string]bool{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" && e.Name() != "out" {
			ix.top[e.Name()] = true
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "out" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			ix.names[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// checkPath returns why span, a code span of a document, names no file of
// the repository ("" when it does, or is not a path).
func (ix repoIndex) checkPath(span string) string {
	s := lineSuffix.ReplaceAllString(strings.TrimRight(span, ".,;:"), "")
	if !pathChars.MatchString(s) || notAPath(s) {
		return ""
	}
	if _, ok := examples[s]; ok {
		return ""
	}
	first, _, hasDir := strings.Cut(s, "/")
	switch {
	case hasDir && ix.top[first]:
		if !ix.exists(s) && !ix.exists(pkgOfIdent(s)) {
			return "does not exist"
		}
	case !hasDir && ix.top[s]:
	case !hasDir && bareFile.MatchString(s):
		if !ix.names[s] {
			return "is no file's name anywhere in the repository"
		}
	}
	return ""
}

func (ix repoIndex) exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(ix.root, filepath.FromSlash(path.Clean(p))))
	return err == nil
}

// pkgOfIdent is the package directory of "backend/libvirt/domxml.Build"
// (an identifier named by its package's path), "" when s is not one.
func pkgOfIdent(s string) string {
	dir, base := path.Split(s)
	pkg, ident, ok := strings.Cut(base, ".")
	if !ok || ident == "" || ident[0] < 'A' || ident[0] > 'Z' {
		return ""
	}
	return dir + pkg
}

// codeSpans returns the inline code spans of a Markdown document, outside
// fenced blocks (a shell example is not a claim about the tree).
func codeSpans(doc string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

func TestDocPathsExist(t *testing.T) {
	t.Parallel()
	ix := indexRepo(t, "..")
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "../README.md")
	checked := 0
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range codeSpans(string(b)) {
			if strings.Contains(span, "/") || bareFile.MatchString(span) {
				checked++
			}
			if why := ix.checkPath(span); why != "" {
				t.Errorf("%s: `%s` %s", strings.TrimPrefix(d, "../"), span, why)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d path-like spans; is the pattern intact?", checked)
	}
}

// TestCheckPath: the checker refuses what it must and passes examples.
func TestCheckPath(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, p := range []string{"server/lifecycle/run.go", "Makefile", "test/soak/soak_test.go"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ix := indexRepo(t, root)
	for span, ok := range map[string]bool{
		"server/lifecycle/run.go":     true,
		"server/lifecycle/run.go:42":  true,
		"server/lifecycle":            true,
		"test/soak/":                  true,
		"Makefile":                    true,
		"run.go":                      true,
		"server/lifecycle/types.go":   false,
		"server/gone":                 false,
		"moves.go":                    false,
		"record.Error":                true, // an identifier
		"make test":                   true, // a command
		"--state FILE":                true,
		"/run/bigfleet-libvirt-env/x": true,
		"server/lifecycle/*_test.go":  true,
		"out/test-stages.tsv":         true,
		"bin/libvirt":                 true,
		"zone-a/bf-0001":              true, // not a top-level directory
		"server/lifecycle.Engine":     true, // an identifier by its package's path
		"server/gone.Engine":          false,
		"server/lifecycle/run.go.bak": false,
	} {
		if why := ix.checkPath(span); (why == "") != ok {
			t.Errorf("checkPath(%q) = %q, want ok=%v", span, why, ok)
		}
	}
}
