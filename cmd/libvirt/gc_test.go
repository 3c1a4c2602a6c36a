package main

import (
	"runtime/debug"
	"testing"
)

func TestGCPacingDefault(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if got := setGCPacing(func(string) string { return "" }); got != defaultGCPercent {
		t.Fatalf("without GOGC: %d, want %d", got, defaultGCPercent)
	}
	if p := debug.SetGCPercent(100); p != defaultGCPercent {
		t.Fatalf("the runtime's GC percent is %d, want %d", p, defaultGCPercent)
	}
}

func TestGCPacingLeavesGOGCAlone(t *testing.T) {
	old := debug.SetGCPercent(150) // as GOGC=150 would have set it
	t.Cleanup(func() { debug.SetGCPercent(old) })
	env := map[string]string{"GOGC": "150"}
	if got := setGCPacing(func(k string) string { return env[k] }); got != 150 {
		t.Fatalf("with GOGC=150: %d, want 150", got)
	}
	if p := debug.SetGCPercent(150); p != 150 {
		t.Fatalf("the runtime's GC percent is %d after setGCPacing, want GOGC's 150", p)
	}
}
