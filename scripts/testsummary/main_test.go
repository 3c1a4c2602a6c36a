package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

const goJSON = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"pass","Package":"a","Test":"TestOK"}
{"Action":"pass","Package":"a","Test":"TestOK/sub"}
{"Action":"skip","Package":"a","Test":"TestSkip"}
{"Action":"fail","Package":"a","Test":"TestBad"}
{"Action":"output","Package":"a","Output":"FAIL\n"}
{"Action":"fail","Package":"a"}
{"Action":"pass","Package":"b"}
`

func TestCountGoJSON(t *testing.T) {
	t.Parallel()
	c, _, err := countGoJSON(strings.NewReader(goJSON))
	if err != nil {
		t.Fatal(err)
	}
	// The package-level fail of a is its failing test's, not a second one.
	if c != (Counts{Passed: 2, Failed: 1, Skipped: 1}) {
		t.Fatalf("counts = %+v", c)
	}
}

func TestCountGoJSONPackageFailure(t *testing.T) {
	t.Parallel()
	// A package that does not build fails with no test of its own.
	in := `{"ImportPath":"c","Action":"build-fail"}
{"Action":"start","Package":"c"}
{"Action":"output","Package":"c","Output":"FAIL\tc [build failed]\n"}
{"Action":"fail","Package":"c"}
`
	c, _, err := countGoJSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if c != (Counts{Failed: 1}) {
		t.Fatalf("counts = %+v", c)
	}
	if _, _, err := countGoJSON(strings.NewReader("{\"Action\":\n")); err == nil {
		t.Fatal("a broken event was accepted")
	}
}

func TestCountTAP(t *testing.T) {
	t.Parallel()
	tap := "TAP version 13\nok 1 - x\n# tests 5\n# suites 0\n# pass 3\n# fail 1\n# cancelled 1\n# skipped 0\n# todo 0\n"
	if c := countTAP(tap); c != (Counts{Passed: 3, Failed: 2}) {
		t.Fatalf("counts = %+v", c)
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lastLine(report string) string {
	lines := strings.Split(strings.TrimSpace(report), "\n")
	return lines[len(lines)-1]
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "gotest-test-unit.json", goJSON)
	write(t, dir, "gotest-chart-check.json", `{"Action":"pass","Package":"chart","Test":"TestLint"}`+"\n")
	write(t, dir, "polkit.tap", "# pass 11\n# fail 0\n")
	write(t, dir, "test-stages.tsv", "test-unit\t1\t12\tresults\nlint\t2\t1\tnone\nchart-check\t0\t30\tresults\n")
	report, failed, err := summarize(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// 1 failing test + lint, which failed without writing any result.
	want := "tests: 14 passed, 2 failed, 1 skipped; failed stages: test-unit, lint"
	if got := lastLine(report); got != want || !failed {
		t.Fatalf("closing line %q (failed=%v), want %q", got, failed, want)
	}
	if !strings.Contains(report, "stage lint") || !strings.Contains(report, "FAILED") {
		t.Fatalf("no stage table in\n%s", report)
	}
}

func TestSummarizeGreen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "gotest-x.json", `{"Action":"pass","Package":"x","Test":"TestA"}`+"\n")
	write(t, dir, "test-stages.tsv", "x\t0\t3\tresults\n")
	report, failed, err := summarize(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastLine(report); got != "tests: 1 passed, 0 failed, 0 skipped" || failed {
		t.Fatalf("closing line %q (failed=%v)", got, failed)
	}
}

func TestReadStagesRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"x\t0\t1\n", "x\tno\t1\tnone\n"} {
		if _, err := readStages(bad); err == nil {
			t.Errorf("readStages(%q) accepted", bad)
		}
	}
}

// skipJSON is what go test -json writes for skips: the message is the
// test's last log entry (continuation lines indented further), whatever it
// logged before, and a parallel subtest's output comes in between.
const skipJSON = `{"Action":"run","Package":"m/test/browser","Test":"TestPage"}
{"Action":"output","Package":"m/test/browser","Test":"TestPage","Output":"=== RUN   TestPage\n"}
{"Action":"output","Package":"m/test/browser","Test":"TestPage","Output":"    page_test.go:20: looking for chromium\n"}
{"Action":"output","Package":"m/server/store","Test":"TestDisk/sub","Output":"    disk_test.go:26: cannot mount a tmpfs: exit status 32\n"}
{"Action":"output","Package":"m/server/store","Test":"TestDisk/sub","Output":"        mount: permission denied\n"}
{"Action":"output","Package":"m/test/browser","Test":"TestPage","Output":"    page_test.go:32: chromium not found\n"}
{"Action":"output","Package":"m/test/browser","Test":"TestPage","Output":"--- SKIP: TestPage (0.00s)\n"}
{"Action":"skip","Package":"m/test/browser","Test":"TestPage"}
{"Action":"output","Package":"m/server/store","Test":"TestDisk/sub","Output":"--- SKIP: TestDisk/sub (0.00s)\n"}
{"Action":"skip","Package":"m/server/store","Test":"TestDisk/sub"}
{"Action":"output","Package":"m/server/store","Test":"TestNow","Output":"--- SKIP: TestNow (0.00s)\n"}
{"Action":"skip","Package":"m/server/store","Test":"TestNow"}
`

func TestGoJSONSkips(t *testing.T) {
	t.Parallel()
	c, skips, err := countGoJSON(strings.NewReader(skipJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := []Skip{
		{"m/test/browser", "TestPage", "page_test.go:32: chromium not found"},
		{"m/server/store", "TestDisk/sub", "disk_test.go:26: cannot mount a tmpfs: exit status 32 mount: permission denied"},
		{"m/server/store", "TestNow", ""},
	}
	if c != (Counts{Skipped: 3}) || !reflect.DeepEqual(skips, want) {
		t.Fatalf("counts %+v, skips\n%q\nwant\n%q", c, skips, want)
	}
}

// skipTAP is node --test's TAP reporter: skips at any depth, "#" escaped.
const skipTAP = `TAP version 13
# Subtest: plain skip
ok 1 - plain skip # SKIP
# Subtest: runs
ok 2 - runs
# Subtest: outer
    # Subtest: inner
    ok 1 - inner \# 2 # SKIP no pkcheck \# here
    1..1
ok 3 - outer
# Subtest: later
ok 4 - later # TODO not yet
1..4
# pass 2
# fail 0
# skipped 2
`

func TestTAPSkips(t *testing.T) {
	t.Parallel()
	want := []Skip{{"polkit", "plain skip", ""}, {"polkit", "inner # 2", "no pkcheck # here"}}
	if got := tapSkips("polkit", skipTAP); !reflect.DeepEqual(got, want) {
		t.Fatalf("skips %q, want %q", got, want)
	}
	if c := countTAP(skipTAP); c != (Counts{Passed: 2, Skipped: 2}) {
		t.Fatalf("counts = %+v", c)
	}
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	rules, err := parseAllowList(`# comment
server/store TestCrashChild   # re-exec child
FuzzName/.*                   # any package
polkit plain\sskip            # TAP names have spaces
`)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[Skip]bool{
		{Package: "m/server/store", Test: "TestCrashChild"}:     true,
		{Package: "server/store", Test: "TestCrashChild"}:       true,
		{Package: "m/other/store", Test: "TestCrashChild"}:      false, // another package
		{Package: "m/xserver/store", Test: "TestCrashChild"}:    false, // whole path elements only
		{Package: "m/server/store", Test: "TestCrashChildren"}:  false, // whole name only
		{Package: "m/server/store", Test: "TestCrashChild/sub"}: false,
		{Package: "m/a", Test: "FuzzName/seed#0"}:               true,
		{Package: "m/a", Test: "FuzzName"}:                      false,
		{Package: "polkit", Test: "plain skip"}:                 true,
		{Package: "m/test/lab", Test: "TestLab"}:                false,
	} {
		if got := allowed(rules, s); got != want {
			t.Errorf("allowed(%+v) = %v, want %v", s, got, want)
		}
	}
	for _, bad := range []string{"TestX\n", "TestX #\n", "a b c # why\n", "a ( # why\n"} {
		if _, err := parseAllowList(bad); err == nil {
			t.Errorf("parseAllowList(%q) accepted", bad)
		}
	}
}

// skipRun is a green run with two skips, one of them allowed.
func skipRun(t *testing.T) (string, []allowRule) {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, "gotest-x.json", `{"Action":"pass","Package":"m/x","Test":"TestA"}`+"\n"+skipJSON)
	write(t, dir, "polkit.tap", skipTAP)
	write(t, dir, "test-stages.tsv", "x\t0\t3\tresults\ntest-polkit\t0\t1\tresults\n")
	rules := []allowRule{
		{pkg: "server/store", test: regexp.MustCompile(`^(?:TestDisk/.*|TestNow)$`)},
		{pkg: "polkit", test: regexp.MustCompile(`^(?:.*)$`)},
	}
	return dir, rules
}

func TestSummarizeCIFailsOnDisallowedSkip(t *testing.T) {
	t.Parallel()
	dir, rules := skipRun(t)
	report, failed, err := summarize(dir, rules, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(report, "\nskip not allowed in CI: m/test/browser TestPage: page_test.go:32: chromium not found\n") ||
		!strings.Contains(report, "\nskip: m/server/store TestNow\n") ||
		!strings.Contains(report, "\nskip: polkit inner # 2: no pkcheck # here\n") {
		t.Fatalf("skips not listed in\n%s", report)
	}
	// TestPage moves from the skipped to the failed.
	want := "tests: 3 passed, 1 failed, 4 skipped; disallowed skips: 1"
	if got := lastLine(report); got != want || !failed {
		t.Fatalf("closing line %q (failed=%v), want %q", got, failed, want)
	}
}

func TestSummarizeOutsideCIListsSkips(t *testing.T) {
	t.Parallel()
	dir, _ := skipRun(t)
	report, failed, err := summarize(dir, nil, false) // no rule allows anything
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(report, "\nskip: "); n != 5 || strings.Contains(report, "not allowed") {
		t.Fatalf("%d skip lines in\n%s", n, report)
	}
	if got := lastLine(report); got != "tests: 3 passed, 0 failed, 5 skipped" || failed {
		t.Fatalf("closing line %q (failed=%v)", got, failed)
	}
}

// The closing line CI reads keeps its format, and stays the last line.
func TestClosingLineFormat(t *testing.T) {
	t.Parallel()
	dir, _ := skipRun(t)
	write(t, dir, "test-stages.tsv", "x\t1\t3\tresults\nlint\t2\t1\tnone\n")
	report, _, err := summarize(dir, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^tests: (\d+) passed, (\d+) failed, (\d+) skipped(; .*)?$`)
	if got := lastLine(report); !line.MatchString(got) ||
		got != "tests: 3 passed, 6 failed, 0 skipped; failed stages: x, lint; disallowed skips: 5" {
		t.Fatalf("closing line %q", got)
	}
	if !strings.HasSuffix(report, "\n") || strings.Count(report, "tests: ") != 1 {
		t.Fatalf("report\n%s", report)
	}
}

// The committed allow-list parses, allows the skips it names and none
// where a real part is missing.
func TestCommittedAllowList(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../../test/allowed-skips.txt")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseAllowList(string(text))
	if err != nil {
		t.Fatal(err)
	}
	const m = "github.com/bigfleet/libvirt-provider/"
	for s, want := range map[Skip]bool{
		{Package: m + "server/store", Test: "TestCrashChild"}:                 true,
		{Package: m + "server/store", Test: "TestCompactKilled"}:              true,
		{Package: m + "backend/libvirt", Test: "FuzzDomainName/seed#3"}:       true,
		{Package: m + "test/chart", Test: "TestDump"}:                         true,
		{Package: m + "test/lab", Test: "TestLabHosts"}:                       false,
		{Package: m + "test/browser", Test: "TestAdminPage"}:                  false,
		{Package: m + "test/integration", Test: "TestPoolSpread"}:             false,
		{Package: m + "backend/libvirt", Test: "TestReconnectUnderCallsReal"}: false,
		{Package: m + "server/store", Test: "TestDiskFull"}:                   false,
		{Package: m + "test/image", Test: "TestImageUnderRunc"}:               false,
	} {
		if got := allowed(rules, s); got != want {
			t.Errorf("allowed(%s %s) = %v, want %v", s.Package, s.Test, got, want)
		}
	}
}
