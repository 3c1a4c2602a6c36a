// Package docs holds the operator documentation; its test keeps the
// documentation honest about the code it describes.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sourceText is every non-test, non-generated .go file of the repository,
// concatenated: the messages the provider can print come from there.
func sourceText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "gen", "node_modules", "testdata", "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(src)
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// "<x>" (a %q) or <x> (a %s/%d/%v/%w) stands for a run-time value.
	placeholder = regexp.MustCompile(`"?<[^<>]+>"?`)
)

// quotedMessages returns the messages quoted in the first column of the
// tables of a document (the header row has none).
func quotedMessages(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, c := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, c[1])
		}
	}
	return out
}

// fragments are the literal parts of a quoted message, without the
// placeholders and the punctuation that joins wrapped errors (": ", "(").
func fragments(msg string) []string {
	var out []string
	for _, f := range placeholder.Split(msg, -1) {
		f = strings.Trim(f, " :;,.()/")
		if len(f) >= 4 {
			out = append(out, f)
		}
	}
	return out
}

// TestTroubleshootingMessagesExist fails when a message quoted in
// troubleshooting.md no longer appears in the code: the doc would send an
// operator looking for text the provider never prints.
func TestTroubleshootingMessagesExist(t *testing.T) {
	t.Parallel()
	src := sourceText(t)
	msgs := quotedMessages(t, "troubleshooting.md")
	if len(msgs) < 40 {
		t.Fatalf("found only %d quoted messages; is the table format intact?", len(msgs))
	}
	for _, msg := range msgs {
		frags := fragments(msg)
		if len(frags) == 0 {
			t.Errorf("quoted message %q has no literal text to check", msg)
			continue
		}
		for _, f := range frags {
			if strings.Contains(src, f) {
				continue
			}
			// Wrapped errors print as "outer: inner", each part its own
			// literal in the code ("%s failed: %s" + the cause).
			for _, part := range strings.Split(f, ": ") {
				part = strings.Trim(part, " :;,.()/")
				if len(part) >= 4 && !strings.Contains(src, part) {
					t.Errorf("troubleshooting.md quotes %q, but the code has no %q", msg, part)
				}
			}
		}
	}
}

func TestFragments(t *testing.T) {
	t.Parallel()
	got := fragments(`--connect: zone "<zone>" listed twice`)
	want := []string{"--connect: zone", "listed twice"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("fragments = %q, want %q", got, want)
	}
	if f := fragments("<kind> timed out after <duration>"); len(f) != 1 || f[0] != "timed out after" {
		t.Fatalf("fragments = %q", f)
	}
}

// flagDecl matches the flag declarations of cmd/libvirt.
var flagDecl = regexp.MustCompile(`fs\.[A-Za-z0-9]+Var\(&[^,]+, "([a-z0-9-]+)"`)

// TestConfigurationListsEveryFlag: configuration.md documents every flag
// cmd/libvirt declares (and no flag it does not).
func TestConfigurationListsEveryFlag(t *testing.T) {
	t.Parallel()
	// Flags are declared in flags.go and beside the feature they belong
	// to (ha.go's --leader-elect): read every non-test file.
	files, err := filepath.Glob(filepath.Join("..", "cmd", "libvirt", "*.go"))
	if err != nil || len(files) == 0 {
		t.Skipf("cmd/libvirt: %v", err)
	}
	var src []byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	doc, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, m := range flagDecl.FindAllStringSubmatch(string(src), -1) {
		declared[m[1]] = true
		if !strings.Contains(string(doc), "| `--"+m[1]+"` |") {
			t.Errorf("configuration.md has no table row for --%s", m[1])
		}
	}
	if len(declared) < 20 {
		t.Fatalf("found only %d flag declarations in cmd/libvirt", len(declared))
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		if !declared[m[1]] {
			t.Errorf("configuration.md documents --%s, which cmd/libvirt does not declare", m[1])
		}
	}
}
