package lifecycle

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// logBuf collects JSON log lines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the log records with the given msg.
func (l *logBuf) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.b.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Rule 4: a failed or timed-out transition logs "transition finished" at
// WARN with its last_error; a success stays INFO with no err.
func TestTransitionFinishedLogLevels(t *testing.T) {
	t.Parallel()
	logs := &logBuf{}
	f := newFixture(t, 3, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		c.DrainTimeout = 20 * time.Millisecond
	})
	f.toIdle("m000")
	f.be.setFail(record.OpConfigure, errors.New("hook exited with status 3"))
	f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c"})
	failed := f.waitState("m000", record.Failed)
	waitFor(t, "the failure's log line", func() bool {
		for _, r := range logs.records("transition finished") {
			if r["outcome"] == "failed" {
				return true
			}
		}
		return false
	})
	want := map[string][2]string{"succeeded": {"INFO", ""}, "failed": {"WARN", failed.LastError}}
	got := map[string][2]string{}
	for _, r := range logs.records("transition finished") {
		errAttr, _ := r["err"].(string)
		got[r["outcome"].(string)] = [2]string{r["level"].(string), errAttr}
	}
	for outcome, w := range want {
		if got[outcome] != w {
			t.Errorf("outcome=%s logged as %v, want %v", outcome, got[outcome], w)
		}
	}
}

// Rule 4: every path that makes a machine FAILED leaves a non-empty
// last_error: a backend error with no text, a timeout, a Configure
// interrupted by a restart, a vanished VM, and the sweep.
func TestEveryFailedPathHasLastError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5, func(c *Config) { c.DeleteTimeout = 20 * time.Millisecond })
	f.toIdle("m000")
	f.be.setFail(record.OpCreate, errors.New(""))
	f.e.Create(t.Context(), record.CreateRequest{MachineID: "m001"})
	f.waitState("m001", record.Failed)
	f.be.setFail(record.OpCreate, nil)
	f.toIdle("m002")
	f.be.hold(record.OpDelete) // never released: the Delete times out
	f.e.Delete(t.Context(), record.DeleteRequest{MachineID: "m002"})
	f.waitState("m002", record.Failed)
	f.toIdle("m003")
	f.be.hold(record.OpConfigure)
	f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m003", ClusterID: "c"})
	f.e.Close()
	f.be.mu.Lock()
	delete(f.be.vms, "m000") // vanishes while the provider is down
	delete(f.be.gate, record.OpConfigure)
	f.be.mu.Unlock()
	logs := &logBuf{}
	// resume fails m003's Configure; reconcile finds m000 gone
	f.start(5, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	f.waitState("m003", record.Failed)
	m0 := f.waitState("m000", record.Failed)
	waitFor(t, "the vanished log line", func() bool { return len(logs.records("reconcile")) > 0 })
	if r := logs.records("reconcile"); len(r) != 1 || r[0]["level"] != "WARN" || r[0]["err"] != m0.LastError {
		t.Errorf("vanished log lines: %v", r)
	}

	// The sweep path: a record transitional past its deadline with no run.
	f.e.Close()
	orphan := f.st.stored("m004")
	orphan.State, orphan.OpKind, orphan.OperationID = record.Draining, record.OpDrain, "op-gone"
	orphan.OpDeadline = time.Now().Add(-time.Minute)
	f.st.machines["m004"] = orphan
	e, err := New(Config{Provider: "test"}, f.st, f.be)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Sweep()
	for _, id := range []string{"m000", "m001", "m002", "m003", "m004"} {
		m, _ := e.Get(t.Context(), id)
		if m.State != record.Failed || strings.TrimSpace(m.LastError) == "" {
			t.Errorf("%s: state %s, last_error %q", id, m.State, m.LastError)
		}
	}
}
