//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
)

// TestBaseUserDataSeed: with --base-user-data, Create uploads a NoCloud seed
// volume and attaches it read-only; Delete removes it with the overlay.
func TestBaseUserDataSeed(t *testing.T) {
	e := loadEnv(t)
	if _, err := exec.LookPath("genisoimage"); err != nil {
		if _, err := exec.LookPath("xorriso"); err != nil {
			t.Skip("no genisoimage/xorriso: --base-user-data is refused at startup without one")
		}
	}
	ud := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(ud, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := newBackendWith(t, e, "it-seed", func(c *libvirt.Config) { c.BaseUserData = ud })
	id := uniq("seed")
	ctx := t.Context()
	pl, err := b.Create(ctx, machine(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupDomain(t, e, pl.Domain) })
	seed := pl.Domain + "-seed.iso"
	if !strings.Contains(virsh(t, e, "vol-list", e.Pool), seed) {
		t.Fatal("seed volume missing")
	}
	if !strings.Contains(virsh(t, e, "domblklist", pl.Domain), seed) {
		t.Fatal("seed not attached")
	}
	if err := b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(virsh(t, e, "vol-list", e.Pool), pl.Domain) {
		t.Fatal("Delete left a volume")
	}
}
