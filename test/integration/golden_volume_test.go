//go:build integration && (golden || shapes)

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"
)

// goldenPoolVolume copies a golden image of scripts/golden/build.sh into the
// env's pool once per content (the volume is named after the sha256 in the
// builder's .sha256 file) and returns the volume's name. Copies of other
// builds not used for a day are removed: each is half a gigabyte.
func goldenPoolVolume(t *testing.T, e env, image string) string {
	t.Helper()
	sum, err := os.ReadFile(image + ".sha256")
	if err != nil || len(sum) < 16 {
		t.Fatalf("%s.sha256: %v", image, err)
	}
	var pool libvirtxml.StoragePool
	if err := pool.Unmarshal(virsh(t, e, "pool-dumpxml", e.Pool)); err != nil || pool.Target == nil {
		t.Fatalf("pool %s: %v", e.Pool, err)
	}
	name := "bigfleet-golden-" + string(sum[:16]) + ".qcow2"
	dst := filepath.Join(pool.Target.Path, name)
	if _, err := os.Stat(dst); err != nil {
		if out, err := exec.Command("cp", "--sparse=always", image, dst+".tmp").CombinedOutput(); err != nil {
			t.Fatalf("copy the image into the pool: %v %s", err, out)
		}
		if err := os.Chmod(dst+".tmp", 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dst+".tmp", dst); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	_ = os.Chtimes(dst, now, now)
	old, _ := filepath.Glob(filepath.Join(pool.Target.Path, "bigfleet-golden-*.qcow2"))
	for _, p := range old {
		if fi, err := os.Stat(p); err == nil && p != dst && now.Sub(fi.ModTime()) > 24*time.Hour {
			_ = os.Remove(p)
		}
	}
	virsh(t, e, "pool-refresh", e.Pool)
	return name
}
