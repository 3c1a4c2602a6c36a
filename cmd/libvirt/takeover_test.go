package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/intents"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestStandInEngine: before a standby has built its engine (takeover),
// the handlers' stand-in answers every call Unavailable, reads empty, a
// watch ends at once, and the backend is the real one.
func TestStandInEngine(t *testing.T) {
	t.Parallel()
	be := fake.New(fake.Options{})
	l := lateEngine{p: &atomic.Pointer[lifecycle.Engine]{}, be: be}
	var le *record.Error
	if _, err := l.Create(t.Context(), record.CreateRequest{MachineID: "m"}); !errors.As(err, &le) || le.Code != record.CodeUnavailable {
		t.Errorf("Create before takeover: %v, want Unavailable", err)
	}
	if _, err := l.GetShared(t.Context(), "m"); !errors.As(err, &le) || le.Code != record.CodeUnavailable {
		t.Errorf("Get before takeover: %v, want Unavailable", err)
	}
	if l.Counts() != nil || l.Marks() != nil || l.Backend() != be {
		t.Error("reads before takeover are not empty, or the backend is not the real one")
	}
	ch, _, cancel := l.Watch(1)
	defer cancel()
	if _, open := <-ch; open {
		t.Error("a watch before takeover stays open")
	}
}

// TestSetAsideState: a process under --leader-elect sets aside its state
// file and the admin cordon and down files beside it (each kept as
// FILE.previous-term): what the new leader acts on comes from the shared
// journal and the hosts.
func TestSetAsideState(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.db")
	files := []string{state, admin.CordonFileFor(state), admin.DownFileFor(state)}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("stale"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := setAsideState(state, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s not set aside: %v", f, err)
		}
		if b, err := os.ReadFile(f + ".previous-term"); err != nil || string(b) != "stale" {
			t.Errorf("%s.previous-term: %q %v", f, b, err)
		}
	}
	if err := setAsideState(state, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("nothing to set aside: %v", err)
	}
}

// The kinds the admin API shares are the journal's.
func TestHostFileKinds(t *testing.T) {
	t.Parallel()
	if admin.HostFileCordons != intents.HostCordons || admin.HostFileDowns != intents.HostDowns {
		t.Fatal("admin and intents name the host files differently")
	}
}
