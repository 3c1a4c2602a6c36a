package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// event is a test2json event.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on pass/fail/skip
}

// printer turns events into progress lines. Only top-level tests get
// start/end lines; a subtest's output is part of its parent's.
type printer struct {
	w     io.Writer
	start time.Time

	running                 map[string]time.Time // top-level test → when it started
	output                  map[string][]string  // top-level test (or "" for the package) → output
	passed, failed, skipped int
	failures                []string
}

func newPrinter(w io.Writer, start time.Time) *printer {
	return &printer{w: w, start: start, running: map[string]time.Time{}, output: map[string][]string{}}
}

// stamp prefixes a line with the time since the suite started.
func (p *printer) stamp(now time.Time) string {
	return fmt.Sprintf("[%8s]", now.Sub(p.start).Round(time.Second))
}

// top is the top-level test of a test name ("TestA/sub" → "TestA").
func top(test string) string {
	name, _, _ := strings.Cut(test, "/")
	return name
}

func (p *printer) handle(e event, now time.Time) {
	key := e.Package + " " + top(e.Test)
	if e.Test == "" {
		key = e.Package
	}
	isTop := e.Test != "" && !strings.Contains(e.Test, "/")
	took := time.Duration(e.Elapsed * float64(time.Second)).Round(100 * time.Millisecond)
	switch e.Action {
	case "output", "build-output":
		p.output[key] = append(p.output[key], e.Output)
	case "run":
		if isTop {
			p.running[key] = now
			fmt.Fprintf(p.w, "%s start %s\n", p.stamp(now), e.Test)
		}
	case "pass", "skip", "fail":
		p.end(e, key, isTop, took, now)
	}
}

// end reports a test's (or a package's) result.
func (p *printer) end(e event, key string, isTop bool, took time.Duration, now time.Time) {
	if e.Test == "" { // the package
		word := "ok  "
		if e.Action == "fail" {
			word = "FAIL"
			p.dump(key)
		}
		fmt.Fprintf(p.w, "%s %s %s (%s)\n", p.stamp(now), word, e.Package, took)
		delete(p.output, key)
		return
	}
	switch e.Action {
	case "pass":
		p.passed++
	case "skip":
		p.skipped++
	case "fail":
		p.failed++
		p.failures = append(p.failures, e.Test)
	}
	if !isTop {
		return
	}
	delete(p.running, key)
	switch e.Action {
	case "pass":
		fmt.Fprintf(p.w, "%s pass  %s (%s)\n", p.stamp(now), e.Test, took)
	case "skip":
		fmt.Fprintf(p.w, "%s skip  %s (%s)\n", p.stamp(now), e.Test, took)
		p.dump(key) // the reason it was skipped
	case "fail":
		fmt.Fprintf(p.w, "%s FAIL  %s (%s)\n", p.stamp(now), e.Test, took)
		p.dump(key)
	}
	delete(p.output, key)
}

// dump prints the output kept for key as go test printed it (t.Log lines
// come indented already), less the framing its own lines repeat:
// "=== RUN/PAUSE/CONT/NAME", "--- PASS" and "--- SKIP" (a "--- FAIL" names
// the subtest that failed, so it stays).
func (p *printer) dump(key string) {
	for _, line := range p.output[key] {
		if strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- PASS") || strings.HasPrefix(line, "--- SKIP") {
			continue
		}
		fmt.Fprint(p.w, line)
		if !strings.HasSuffix(line, "\n") {
			fmt.Fprintln(p.w)
		}
	}
}

// heartbeat lists the tests still running and for how long, longest first.
func (p *printer) heartbeat(now time.Time) {
	if len(p.running) == 0 {
		return
	}
	keys := make([]string, 0, len(p.running))
	for k := range p.running {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return p.running[keys[i]].Before(p.running[keys[j]]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		_, name, _ := strings.Cut(k, " ")
		parts[i] = fmt.Sprintf("%s (%s)", name, now.Sub(p.running[k]).Round(time.Second))
	}
	fmt.Fprintf(p.w, "%s running %s\n", p.stamp(now), strings.Join(parts, ", "))
}

// done prints the suite's totals and the failed tests.
func (p *printer) done(now time.Time) {
	// Not "N passed, N failed": that is make test's closing line alone.
	fmt.Fprintf(p.w, "%s suite done in %s: %d tests passed, %d failed, %d skipped\n",
		p.stamp(now), now.Sub(p.start).Round(time.Second), p.passed, p.failed, p.skipped)
	for _, f := range p.failures {
		fmt.Fprintf(p.w, "    failed: %s\n", f)
	}
}
