// Command testsummary prints make test's closing line from what the stages
// left in out/: every gotestsum/go test JSON file (out/gotest-*.json, also
// those written by nested make calls), node's TAP reports (out/*.tap) and
// the stage runner's table (out/test-stages.tsv, scripts/test-stages.sh).
// Every skipped test gets a line with its skip message; with CI=true a skip
// the allow-list (-allow, test/allowed-skips.txt) does not name counts as a
// failure: a suite whose real part (libvirtd, the lab, Chromium, runc) is
// missing must not pass by skipping. It exits 1 when anything failed.
//
//	usage: testsummary [-allow FILE] [DIR]
//
//	skip: github.com/bigfleet/libvirt-provider/server/store TestCrashChild: crash_test.go:32: child of TestCrash only
//	skip not allowed in CI: github.com/bigfleet/libvirt-provider/test/browser TestAdminPage: admin_page_test.go:34: chromium not found: ...
//	tests: 530 passed, 3 failed, 1 skipped; failed stages: test-integration; disallowed skips: 1
//
// The counts are one word, a colon, then "N passed, N failed, N skipped":
// the plain closing line CI reads, always the last; failed stages and
// disallowed skips (counted among the failed, not the skipped) follow only
// when there are any.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Counts is what a run's results add up to.
type Counts struct {
	Passed, Failed, Skipped int
}

func (c *Counts) add(o Counts) {
	c.Passed += o.Passed
	c.Failed += o.Failed
	c.Skipped += o.Skipped
}

// Skip is one skipped test and why it skipped. TAP skips carry the report's
// file name (polkit for out/polkit.tap) as their package.
type Skip struct {
	Package, Test, Message string
}

// event is the part of a test2json event the counts need.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// countGoJSON counts the tests (subtests included) of one go test -json
// stream and lists its skips. A package that failed with no failing test
// of its own (it did not build, panicked outside a test, or its binary
// timed out) counts as one failure, so a red package is never a green line.
func countGoJSON(r io.Reader) (Counts, []Skip, error) {
	var c Counts
	var skips []Skip
	lastLog := map[[2]string][]string{} // a running test's last log entry
	failedTests := map[string]bool{}
	var failedPkgs []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20) // one output line can be long
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // stray non-JSON output: not an event
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return c, nil, fmt.Errorf("bad event %.80q: %w", line, err)
		}
		key := [2]string{e.Package, e.Test}
		entry := lastLog[key]
		switch e.Action {
		case "output":
			lastLog[key] = logEntry(entry, e.Output)
		case "pass", "fail", "skip":
			delete(lastLog, key) // the test is over
		}
		switch {
		case e.Test != "" && e.Action == "pass":
			c.Passed++
		case e.Test != "" && e.Action == "skip":
			c.Skipped++
			skips = append(skips, Skip{e.Package, e.Test, strings.Join(entry, " ")})
		case e.Test != "" && e.Action == "fail":
			c.Failed++
			failedTests[e.Package] = true
		case e.Test == "" && e.Action == "fail":
			failedPkgs = append(failedPkgs, e.Package)
		}
	}
	for _, p := range failedPkgs {
		if !failedTests[p] {
			c.Failed++
		}
	}
	return c, skips, sc.Err()
}

// logEntry follows a test's output to keep its last log entry, which for a
// skipped test is the t.Skip message: "    x_test.go:12: message", then
// continuation lines indented further. go test's own lines (=== RUN,
// --- SKIP) are not log.
func logEntry(entry []string, output string) []string {
	line := strings.TrimRight(output, "\n")
	switch {
	case strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- "):
		return entry
	case strings.HasPrefix(line, "        ") && len(entry) > 0:
		return append(entry, strings.TrimSpace(line))
	}
	return []string{strings.TrimSpace(line)}
}

// tapCount matches the summary lines node --test's TAP reporter ends with.
var tapCount = regexp.MustCompile(`(?m)^# (pass|fail|skipped|cancelled) (\d+)$`)

// countTAP reads node's TAP summary; a cancelled test is a failed one.
func countTAP(text string) Counts {
	var c Counts
	for _, m := range tapCount.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "pass":
			c.Passed += n
		case "fail", "cancelled":
			c.Failed += n
		case "skipped":
			c.Skipped += n
		}
	}
	return c
}

// tapSkip matches a skipped test's line, at any depth:
// "ok 3 - name # SKIP reason", with "#" and "\" escaped in name and reason.
var tapSkip = regexp.MustCompile(`(?m)^ *ok \d+ - ((?:\\.|[^\\#\n])*) # SKIP ?(.*)$`)

var tapUnescape = strings.NewReplacer(`\\`, `\`, `\#`, `#`)

// tapSkips lists the skips of one TAP report; pkg names the report.
func tapSkips(pkg, text string) []Skip {
	var out []Skip
	for _, m := range tapSkip.FindAllStringSubmatch(text, -1) {
		out = append(out, Skip{pkg, tapUnescape.Replace(m[1]), tapUnescape.Replace(m[2])})
	}
	return out
}

// allowRule is one line of the allow-list: "[PACKAGE] TEST  # why". PACKAGE
// is an import path or its last elements (server/store), and matches any
// package when left out; TEST is a regexp the whole test name must match
// (FuzzX/.* for all of FuzzX's subtests; \s for a space in a TAP name).
type allowRule struct {
	pkg  string
	test *regexp.Regexp
}

func (r allowRule) allows(s Skip) bool {
	return (r.pkg == "" || s.Package == r.pkg || strings.HasSuffix(s.Package, "/"+r.pkg)) &&
		r.test.MatchString(s.Test)
}

// parseAllowList reads the allow-list; every rule must say why ("# why").
func parseAllowList(text string) ([]allowRule, error) {
	var rules []allowRule
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, why, _ := strings.Cut(line, " #")
		f := strings.Fields(pattern)
		if strings.TrimSpace(why) == "" || len(f) > 2 {
			return nil, fmt.Errorf("line %d: want \"[PACKAGE] TEST  # why\": %q", i+1, line)
		}
		r := allowRule{}
		if len(f) == 2 {
			r.pkg = f[0]
		}
		re, err := regexp.Compile("^(?:" + f[len(f)-1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		r.test = re
		rules = append(rules, r)
	}
	return rules, nil
}

func allowed(rules []allowRule, s Skip) bool {
	for _, r := range rules {
		if r.allows(s) {
			return true
		}
	}
	return false
}

// Stage is one row of the stage runner's table.
type Stage struct {
	Name      string
	ExitCode  int
	Seconds   int
	WroteTest bool // it wrote test results to out/ (which carry its failures)
}

// readStages parses out/test-stages.tsv: name, exit code, seconds, and
// whether the stage wrote test results ("results" or "none").
func readStages(text string) ([]Stage, error) {
	var out []Stage
	for i, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: %d fields, want 4: %q", i+1, len(f), line)
		}
		rc, err1 := strconv.Atoi(f[1])
		secs, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: bad numbers: %q", i+1, line)
		}
		out = append(out, Stage{Name: f[0], ExitCode: rc, Seconds: secs, WroteTest: f[3] == "results"})
	}
	return out, nil
}

// stageTable: one line a stage, its outcome and wall time, so a long run
// shows at its end where the time went and what broke.
func stageTable(stages []Stage) string {
	var b strings.Builder
	for _, s := range stages {
		outcome := "ok"
		if s.ExitCode != 0 {
			outcome = "FAILED"
		}
		fmt.Fprintf(&b, "stage %-18s %6ds  %s\n", s.Name, s.Seconds, outcome)
	}
	return b.String()
}

// summarize counts everything in dir and returns the report (the stage
// table, a line a skip, then the closing line) and whether the run failed.
// With ci, a skip no rule allows is a failure.
func summarize(dir string, rules []allowRule, ci bool) (string, bool, error) {
	var total Counts
	var skips []Skip
	files, _ := filepath.Glob(filepath.Join(dir, "gotest-*.json"))
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return "", true, err
		}
		c, s, err := countGoJSON(r)
		r.Close()
		if err != nil {
			return "", true, fmt.Errorf("%s: %w", f, err)
		}
		total.add(c)
		skips = append(skips, s...)
	}
	taps, _ := filepath.Glob(filepath.Join(dir, "*.tap"))
	for _, f := range taps {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", true, err
		}
		total.add(countTAP(string(b)))
		skips = append(skips, tapSkips(strings.TrimSuffix(filepath.Base(f), ".tap"), string(b))...)
	}
	var skipLines strings.Builder
	disallowed := 0
	for _, s := range skips {
		prefix := "skip"
		if ci && !allowed(rules, s) {
			prefix = "skip not allowed in CI"
			disallowed++
		}
		fmt.Fprintf(&skipLines, "%s: %s %s", prefix, s.Package, s.Test)
		if s.Message != "" {
			fmt.Fprintf(&skipLines, ": %s", s.Message)
		}
		skipLines.WriteString("\n")
	}
	// A disallowed skip is a failed test, not a skipped one.
	total.Skipped -= disallowed
	total.Failed += disallowed
	var stages []Stage
	if b, err := os.ReadFile(filepath.Join(dir, "test-stages.tsv")); err == nil {
		if stages, err = readStages(string(b)); err != nil {
			return "", true, fmt.Errorf("test-stages.tsv: %w", err)
		}
	}
	var failed []string
	for _, s := range stages {
		if s.ExitCode == 0 {
			continue
		}
		failed = append(failed, s.Name)
		if !s.WroteTest {
			total.Failed++ // a failed check (lint, gen-check, demo…) is a failure too
		}
	}
	line := fmt.Sprintf("tests: %d passed, %d failed, %d skipped", total.Passed, total.Failed, total.Skipped)
	if len(failed) > 0 {
		line += "; failed stages: " + strings.Join(failed, ", ")
	}
	if disallowed > 0 {
		line += fmt.Sprintf("; disallowed skips: %d", disallowed)
	}
	return stageTable(stages) + skipLines.String() + line + "\n", total.Failed > 0 || len(failed) > 0, nil
}

func main() {
	allowFile := flag.String("allow", "test/allowed-skips.txt", "the skips allowed under CI=true")
	flag.Parse()
	dir := "out"
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	text, err := os.ReadFile(*allowFile)
	var rules []allowRule
	if err == nil {
		rules, err = parseAllowList(string(text))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary: allow-list:", err)
		os.Exit(2)
	}
	report, failed, err := summarize(dir, rules, os.Getenv("CI") == "true")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	fmt.Print(report)
	if failed {
		os.Exit(1)
	}
}
