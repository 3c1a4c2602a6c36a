package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestUnknownIDMarksNeverReachTheFile runs the engine on a real state file:
// 100 NotFound calls with fresh tokens at invented ids store no mark and do
// not grow the file, while a stale replay is still fenced, and a known
// machine's mark, set by an accepted call, is durable across a reopen.
func TestUnknownIDMarksNeverReachTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() (*lifecycle.Engine, *Bolt) {
		st := openBolt(t, path, BoltOptions{})
		seed := []record.Machine{{ID: "m0", Zone: "z1", InstanceType: "t", CapacityType: record.CapacityOnDemand, VCPU: 1, MemoryMiB: 512}}
		e, err := lifecycle.New(lifecycle.Config{Provider: "p", Seed: seed}, st, fake.New(fake.Options{Zones: []string{"z1"}}))
		if err != nil {
			t.Fatal(err)
		}
		e.Start(t.Context()) // lists the zone: an accepted Create needs it
		return e, st
	}
	e, st := open()
	ctx := t.Context()
	del := func(id string, epoch int64) error {
		_, err := e.Delete(ctx, record.DeleteRequest{MachineID: id, Token: record.Token{ShardID: "s", Epoch: epoch, Sequence: 1}})
		return err
	}
	code := func(err error) record.Code {
		if le, ok := err.(*record.Error); ok {
			return le.Code
		}
		return 0
	}
	// An accepted call makes the known machine's mark durable (a refused
	// first contact would keep it in memory only, issue 39).
	if _, err := e.Create(ctx, record.CreateRequest{MachineID: "m0", Token: record.Token{ShardID: "s", Epoch: 1, Sequence: 1}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // the Create's own commits
		if m, err := e.Get(ctx, "m0"); err == nil && m.State == record.Idle {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("m0 is %v, %v; want IDLE", m.State, err)
		}
	}
	size := fileSize(t, path)
	commits := st.Stats().Commits
	for i := range 100 {
		if err := del(fmt.Sprintf("ghost-%d", i), int64(i)); code(err) != record.CodeNotFound {
			t.Fatalf("ghost-%d: %v", i, err)
		}
	}
	for i := range 100 {
		if err := del(fmt.Sprintf("ghost-%d", i), int64(i)); code(err) != record.CodeFenced {
			t.Fatalf("stale replay at ghost-%d: %v", i, err)
		}
	}
	if st.Stats().Commits != commits || fileSize(t, path) != size {
		t.Fatalf("NotFound calls wrote to the state file: commits %d → %d, size %d → %d",
			commits, st.Stats().Commits, size, fileSize(t, path))
	}
	e.Close()
	must(t, st.Close())

	e, st = open()
	defer st.Close()
	defer e.Close()
	snap, err := st.Load(ctx)
	must(t, err)
	if len(snap.Marks) != 1 || snap.Marks[record.MarkKey{ShardID: "s", MachineID: "m0"}] != (record.Mark{Epoch: 1, Sequence: 1}) {
		t.Fatalf("stored marks: %v", snap.Marks)
	}
	if code(del("m0", 1)) != record.CodeFenced {
		t.Fatal("a known machine's mark must survive a reopen")
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
