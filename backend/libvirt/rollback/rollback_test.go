package rollback

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestRunNewestFirst(t *testing.T) {
	t.Parallel()
	var s Stack
	var order []string
	for _, w := range []string{"a", "b", "c"} {
		s.Push(w, func() error { order = append(order, w); return nil })
	}
	if s.Len() != 3 {
		t.Fatalf("Len = %d, want 3", s.Len())
	}
	if err := s.Run(slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := strings.Join(order, ""); got != "cba" {
		t.Fatalf("order = %q, want cba (newest first)", got)
	}
}

func TestRunKeepsGoingAndNamesFailures(t *testing.T) {
	t.Parallel()
	var s Stack
	boom := errors.New("boom")
	ran := map[string]bool{}
	s.Push("first", func() error { ran["first"] = true; return nil })
	s.Push("broken", func() error { ran["broken"] = true; return boom })
	s.Push("last", func() error { ran["last"] = true; return errors.New("also") })
	var buf bytes.Buffer
	err := s.Run(slog.New(slog.NewTextHandler(&buf, nil)))
	if !ran["first"] || !ran["broken"] || !ran["last"] {
		t.Fatalf("a failure stopped the rollback: ran %v", ran)
	}
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want it to wrap the failed step's error", err)
	}
	for _, want := range []string{"broken: boom", "last: also"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "first") {
		t.Errorf("err %q names a step that succeeded", err)
	}
	log := buf.String()
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "step=broken") || !strings.Contains(log, "step=first") {
		t.Errorf("log does not show each step:\n%s", log)
	}
}

func TestZeroAndReset(t *testing.T) {
	t.Parallel()
	var s Stack
	if err := s.Run(slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("empty Run: %v", err)
	}
	s.Push("x", func() error { t.Error("a dropped step ran"); return nil })
	s = Stack{}
	if err := s.Run(slog.New(slog.DiscardHandler)); err != nil || s.Len() != 0 {
		t.Fatalf("reset stack: err %v, len %d", err, s.Len())
	}
}
