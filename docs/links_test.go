package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// [text](target) and ![alt](target), with an optional "title".
	inlineLink = regexp.MustCompile(`\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	// [label]: target
	refLink = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	// Characters GitHub drops when it turns a heading into an anchor.
	anchorDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// markdownFiles: every .md of the repository outside dependencies and VCS
// metadata, as repo-relative paths.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "out") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// prose is a Markdown document without its fenced code blocks and inline
// code spans: a link shown as code is an example, not a link.
func prose(doc string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(codeSpan.ReplaceAllString(line, ""))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// links returns the link targets of a Markdown document.
func links(doc string) []string {
	var out []string
	text := prose(doc)
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors: the GitHub anchors of a Markdown document's headings.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(prose(doc), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = anchorDrop.ReplaceAllString(strings.ToLower(h), "")
		out[strings.ReplaceAll(h, " ", "-")] = true
	}
	return out
}

// checkLink returns why a relative link of the file doc (repo-relative)
// does not resolve inside the repository at root, or "" when it does.
func checkLink(root, doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "" // external: not ours to check offline
	}
	path, frag, _ := strings.Cut(target, "#")
	file := doc
	if path != "" {
		if filepath.IsAbs(path) {
			return "is absolute"
		}
		file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
		if file == ".." || strings.HasPrefix(file, ".."+string(filepath.Separator)) {
			return "points outside the repository"
		}
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		if info, serr := os.Stat(filepath.Join(root, file)); serr == nil && info.IsDir() {
			if frag == "" {
				return ""
			}
			return "has an anchor on a directory"
		}
		return "does not exist"
	}
	if frag != "" && strings.HasSuffix(file, ".md") && !anchors(string(b))[frag] {
		return "names a heading " + file + " does not have"
	}
	return ""
}

// TestDocLinks: every relative link of every Markdown file of the
// repository (README.md, docs/, deploy/, …) resolves to a file or directory
// inside the repository, and a #anchor into a Markdown file names one of
// its headings. A link that leaves the repository breaks in every clone.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	docs := markdownFiles(t, "..")
	if len(docs) < 10 {
		t.Fatalf("found only %d Markdown files: %q", len(docs), docs)
	}
	checked := 0
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join("..", d))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(b)) {
			checked++
			if why := checkLink("..", d, target); why != "" {
				t.Errorf("%s links to %s, which %s", d, target, why)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("checked only %d links; is the link pattern intact?", checked)
	}
}

// TestCheckLink: the checker itself refuses what it must refuse.
func TestCheckLink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for path, body := range map[string]string{
		"README.md":        "# Title\n",
		"docs/a.md":        "# A page\n## Lifecycle timeouts\n```\n# not a heading\n```\n",
		"docs/img.png":     "",
		"helm/chart/x.txt": "",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		doc, target string
		ok          bool
	}{
		{"README.md", "docs/a.md", true},
		{"README.md", "docs/img.png", true},
		{"README.md", "helm/chart", true},
		{"README.md", "docs/a.md#lifecycle-timeouts", true},
		{"README.md", "#title", true},
		{"docs/a.md", "../README.md", true},
		{"docs/a.md", "a.md#a-page", true},
		{"README.md", "https://example.com/x", true},
		{"README.md", "../shared/CONTRACT.md", false},
		{"docs/a.md", "../../x.md", false},
		{"README.md", "docs/missing.md", false},
		{"README.md", "docs/a.md#not-a-heading", false},
		{"README.md", "/etc/passwd", false},
		{"README.md", "#nope", false},
	} {
		if why := checkLink(root, c.doc, c.target); (why == "") != c.ok {
			t.Errorf("checkLink(%s, %s) = %q, want ok=%v", c.doc, c.target, why, c.ok)
		}
	}
}

func TestLinks(t *testing.T) {
	t.Parallel()
	doc := "see [a](a.md) and ![img](p.png \"t\") and `[x](code.md)`\n" +
		"```\n[y](fenced.md)\n```\n[ref]: ref.md\n"
	got := strings.Join(links(doc), "|")
	if got != "a.md|p.png|ref.md" {
		t.Fatalf("links = %q", got)
	}
}
