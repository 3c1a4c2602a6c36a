package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// tinyDisk mounts a 1 MiB tmpfs for the test (root only; skipped
// otherwise) and unmounts it afterwards.
func tinyDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// A real full disk: a commit fails with ENOSPC and writes nothing, the
// store keeps working once space is freed, and a reopen finds exactly the
// commits that succeeded.
func TestRealDiskFull(t *testing.T) {
	dir := tinyDisk(t)
	path := filepath.Join(dir, "state.db")
	s, err := OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Closed before the tmpfs is unmounted, even when the test fails
	// (a second Close is a no-op).
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	put := func(id string) error {
		return s.Commit(ctx, record.Batch{Machines: []record.Machine{sampleMachine(id)}})
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	// Distinct records, so the file has to grow: bbolt may still have free
	// pages at first, and a compact record takes little of one.
	var failed error
	stored := map[string]bool{}
	for i := 0; i < 4096 && failed == nil; i++ {
		id := fmt.Sprintf("full-%d", i)
		if failed = put(id); failed == nil {
			stored[id] = true
		}
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk: %v, want ENOSPC", failed)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := put("after"); err != nil {
		t.Fatalf("commit once space is back: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(path, BoltOptions{})
	if err != nil {
		t.Fatalf("reopen after a full disk: %v", err)
	}
	defer s.Close()
	snap, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range snap.Machines {
		got[m.ID] = true
	}
	stored["before"], stored["after"] = true, true
	if !maps.Equal(got, stored) {
		t.Fatalf("reopened store holds %d records, want the %d whose commit succeeded", len(got), len(stored))
	}
}
