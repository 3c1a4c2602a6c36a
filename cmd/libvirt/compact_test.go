package main

import (
	"bytes"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// compact-state refuses while the provider runs on the file, then, with
// the provider stopped, compacts it, and the provider restarts on the
// compacted file with every machine.
func TestCompactStateCommand(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	args := []string{"--use-fake-backend", "--seed-count=300", "--state=" + state, "--metrics-addr=", "--fake-zones=za,zb"}
	p := startProvider(t, args...)
	err := run(t.Context(), []string{compactCommand, "--state=" + state, "--lock-timeout=50ms"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("compact-state on a running provider's file: %v", err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{compactCommand, "--state", state}, &out, io.Discard); err != nil {
		t.Fatalf("compact-state: %v", err)
	}
	if !regexp.MustCompile(`^compacted .*state\.db: [0-9.]+ MB -> [0-9.]+ MB \(300 machines, 0 fence marks, 2 offerings\) in `).MatchString(out.String()) {
		t.Errorf("compact-state said %q", out.String())
	}
	p2 := startProvider(t, args...)
	if n := len(p2.list(t).GetMachines()); n != 300 {
		t.Fatalf("after compaction List = %d machines, want 300", n)
	}
}

func TestCompactStateRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--state is required"},
		{[]string{"--state=x", "extra"}, `unexpected argument "extra"`},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--state=" + filepath.Join(t.TempDir(), "state.db")}, "no such file"},
	} {
		err := run(t.Context(), append([]string{compactCommand}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compact-state %v = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{compactCommand, "--help"}, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "-lock-timeout") || !strings.Contains(out.String(), "-state") {
		t.Errorf("compact-state --help = %v:\n%s", err, out.String())
	}
}
