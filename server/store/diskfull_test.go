package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
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
	ctx := context.Background()
	put := func(id string) error {
		return s.Commit(ctx, lifecycle.Batch{Machines: []lifecycle.Machine{sampleMachine(id)}})
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	var failed error
	fullStored := false
	for i := 0; i < 64 && failed == nil; i++ { // bbolt may still have free pages at first
		if failed = put("full"); failed == nil {
			fullStored = true
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
	if !got["before"] || !got["after"] || got["full"] != fullStored {
		t.Fatalf("reopened store holds %v (a full-disk commit succeeded: %v)", got, fullStored)
	}
}
