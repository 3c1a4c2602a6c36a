package libvirt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

func needISOTool(t *testing.T) {
	t.Helper()
	if volume.ISOTool() == "" {
		t.Skipf("no ISO tool (%s) on PATH: --base-user-data is refused at startup here", strings.Join(volume.ISOTools, ", "))
	}
}

func userData(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(p, []byte("#cloud-config\nhostname: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSeedISOIsNoCloud(t *testing.T) {
	t.Parallel()
	needISOTool(t)
	iso, err := volume.BuildSeedISO(userData(t), "bf-p-m-12345678")
	if err != nil {
		t.Fatal(err)
	}
	// ISO 9660: the primary volume descriptor is sector 16; its volume id
	// (what cloud-init's NoCloud looks for) is at byte 40 of it.
	const pvd = 16 * 2048
	if len(iso) < pvd+72 || iso[pvd] != 1 || string(iso[pvd+1:pvd+6]) != "CD001" {
		t.Fatal("not an ISO 9660 image")
	}
	if id := strings.TrimSpace(string(iso[pvd+40 : pvd+72])); !strings.EqualFold(id, "cidata") {
		t.Fatalf("volume id %q, want cidata", id)
	}
	for _, want := range []string{"#cloud-config", "instance-id: bf-p-m-12345678"} {
		if !bytes.Contains(iso, []byte(want)) {
			t.Errorf("ISO lacks %q", want)
		}
	}
}

// A seed whose upload fails rolls back both volumes the attempt made: the
// seed and the overlay before it. The failure is injected at the upload
// (whatever the driver could do), so the rollback always runs.
func TestSeedFailureRollsBackBothVolumes(t *testing.T) {
	t.Parallel()
	needISOTool(t)
	ud := userData(t)
	b, f, _ := newFaultBackend(t, func(c *Config) { c.BaseUserData = ud }, func(f *faults) { f.emulateU = true })
	name := meta.DomainName(b.cfg.Provider, "m1")
	r := f.add(&fault{op: "conn.UploadVolume", name: meta.SeedName(name), kind: faultInternal})
	_, err := b.Create(context.Background(), spec("m1"))
	if f.hits(r) != 1 {
		t.Fatalf("the upload fault did not fire (err %v)", err)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "create: seed volume: upload: ") {
		t.Fatalf("err = %v, want the seed upload's failure", err)
	}
	made := strings.Join(f.mutations(), "\n")
	for _, v := range []string{meta.OverlayName(name), meta.SeedName(name)} {
		if !strings.Contains(made, "pool.StorageVolCreateXML "+v) {
			t.Fatalf("the attempt did not make volume %s before the upload failed (calls: %q)", v, f.mutations())
		}
	}
	c := testConn(t, b, "z1")
	if volumeExists(t, c, "bigfleet", meta.SeedName(name)) || volumeExists(t, c, "bigfleet", meta.OverlayName(name)) {
		t.Fatal("rollback left a volume")
	}
	if domainExists(t, c, name) {
		t.Fatal("a failed seed left a domain")
	}
}
