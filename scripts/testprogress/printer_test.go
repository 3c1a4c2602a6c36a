package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPrinter(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPrinter(&b, t0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, c := range []struct {
		s int
		e event
	}{
		{0, event{Action: "run", Package: "it", Test: "TestA"}},
		{1, event{Action: "output", Package: "it", Test: "TestA", Output: "=== RUN   TestA\n"}},
		{2, event{Action: "run", Package: "it", Test: "TestA/sub"}},
		{3, event{Action: "pass", Package: "it", Test: "TestA/sub", Elapsed: 1}},
		{12, event{Action: "pass", Package: "it", Test: "TestA", Elapsed: 12.04}},
		{12, event{Action: "run", Package: "it", Test: "TestB"}},
		{13, event{Action: "output", Package: "it", Test: "TestB/x", Output: "    b_test.go:9: machine went FAILED: qemu died\n"}},
		{14, event{Action: "fail", Package: "it", Test: "TestB/x", Elapsed: 1}},
	} {
		p.handle(c.e, at(c.s))
	}
	p.heartbeat(at(75))
	p.handle(event{Action: "fail", Package: "it", Test: "TestB", Elapsed: 64}, at(76))
	p.handle(event{Action: "fail", Package: "it", Elapsed: 76}, at(76))
	p.done(at(77))
	got := b.String()
	for _, want := range []string{
		"[      0s] start TestA\n",
		"[     12s] pass  TestA (12s)\n",
		"[     12s] start TestB\n",
		"[   1m15s] running TestB (1m3s)\n",
		"[   1m16s] FAIL  TestB (1m4s)\n    b_test.go:9: machine went FAILED: qemu died\n",
		"[   1m16s] FAIL it (1m16s)\n",
		"suite done in 1m17s: 2 tests passed, 2 failed, 0 skipped\n",
		"    failed: TestB/x\n    failed: TestB\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// A passing test's output and subtests stay quiet.
	for _, unwanted := range []string{"=== RUN", "start TestA/sub", "pass  TestA/sub"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}
}

func TestHeartbeatQuietWhenIdle(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := newPrinter(&b, time.Now())
	p.heartbeat(time.Now())
	if b.Len() != 0 {
		t.Fatalf("heartbeat with nothing running printed %q", b.String())
	}
}

// TestRun: the events are kept byte for byte and go test's exit code is
// passed on (a fake go stands in for the real one).
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	events := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":0.5}
{"Action":"fail","Package":"p","Elapsed":0.6}
`
	fakeGo := filepath.Join(dir, "go")
	script := "#!/bin/sh\n[ \"$1 $2 $3\" = 'test -json -count=1' ] || exit 9\ncat <<'EOF'\n" + events + "EOF\nexit 3\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(dir, "events.json")
	var progress strings.Builder
	if code := run(fakeGo, jsonPath, time.Hour, []string{"-count=1", "./..."}, &progress); code != 3 {
		t.Fatalf("exit code %d, want go test's 3", code)
	}
	kept, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(kept) != events {
		t.Fatalf("kept %q, want %q", kept, events)
	}
	if !strings.Contains(progress.String(), "FAIL  TestA (500ms)") {
		t.Fatalf("progress:\n%s", progress.String())
	}
}
