package main

import (
	"os"
	"path/filepath"
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
	c, err := countGoJSON(strings.NewReader(goJSON))
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
	c, err := countGoJSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if c != (Counts{Failed: 1}) {
		t.Fatalf("counts = %+v", c)
	}
	if _, err := countGoJSON(strings.NewReader("{\"Action\":\n")); err == nil {
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
	report, failed, err := summarize(dir)
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
	report, failed, err := summarize(dir)
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
