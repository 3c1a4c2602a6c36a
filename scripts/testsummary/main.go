// Command testsummary prints make test's closing line from what the stages
// left in out/: every gotestsum/go test JSON file (out/gotest-*.json, also
// those written by nested make calls), node's TAP reports (out/*.tap) and
// the stage runner's table (out/test-stages.tsv, scripts/test-stages.sh).
// It exits 1 when anything failed.
//
//	tests: 530 passed, 2 failed, 1 skipped; failed stages: test-integration
//
// The counts are one word, a colon, then "N passed, N failed, N skipped":
// the plain closing line CI reads; failed stages follow only on failure.
package main

import (
	"bufio"
	"encoding/json"
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

// event is the part of a test2json event the counts need.
type event struct {
	Action  string
	Package string
	Test    string
}

// countGoJSON counts the tests (subtests included) of one go test -json
// stream. A package that failed with no failing test of its own (it did
// not build, panicked outside a test, or its binary timed out) counts as
// one failure, so a red package is never a green line.
func countGoJSON(r io.Reader) (Counts, error) {
	var c Counts
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
			return c, fmt.Errorf("bad event %.80q: %w", line, err)
		}
		switch {
		case e.Test != "" && e.Action == "pass":
			c.Passed++
		case e.Test != "" && e.Action == "skip":
			c.Skipped++
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
	return c, sc.Err()
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
// table, then the closing line) and whether the run failed.
func summarize(dir string) (string, bool, error) {
	var total Counts
	files, _ := filepath.Glob(filepath.Join(dir, "gotest-*.json"))
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return "", true, err
		}
		c, err := countGoJSON(r)
		r.Close()
		if err != nil {
			return "", true, fmt.Errorf("%s: %w", f, err)
		}
		total.add(c)
	}
	taps, _ := filepath.Glob(filepath.Join(dir, "*.tap"))
	for _, f := range taps {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", true, err
		}
		total.add(countTAP(string(b)))
	}
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
	return stageTable(stages) + line + "\n", total.Failed > 0 || len(failed) > 0, nil
}

func main() {
	dir := "out"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	report, failed, err := summarize(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	fmt.Print(report)
	if failed {
		os.Exit(1)
	}
}
