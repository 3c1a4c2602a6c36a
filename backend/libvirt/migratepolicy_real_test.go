//go:build reallibvirt

package libvirt

// The destination XML of a migration, as libvirt renders a domain our
// Create defined, must pass the definition policy. Against the real
// daemon of scripts/libvirt-env.sh (BIGFLEET_LIBVIRT_URI and the rest of
// its env file), under the shared lock:
//
//	source /run/bigfleet-libvirt-env/env && flock /tmp/bf-real-libvirt.lock \
//	  go test -tags reallibvirt -run TestDestXMLPolicyReal -count=1 -v ./backend/libvirt/

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
)

func realConfig(t *testing.T) Config {
	t.Helper()
	uri := os.Getenv("BIGFLEET_LIBVIRT_URI")
	if uri == "" {
		t.Skip("BIGFLEET_LIBVIRT_URI not set: source the env file of scripts/libvirt-env.sh")
	}
	return Config{
		Hosts:    []Host{{Zone: "z1", URI: uri}},
		Provider: "realxml", Image: os.Getenv("BIGFLEET_IMAGE"), Pool: os.Getenv("BIGFLEET_POOL"),
		Network: os.Getenv("BIGFLEET_NETWORK"), Kernel: os.Getenv("BIGFLEET_KERNEL"),
		Initrd: os.Getenv("BIGFLEET_INITRD"), Cmdline: os.Getenv("BIGFLEET_CMDLINE"),
		AgentTimeout: 5 * time.Second, InventoryTimeout: 30 * time.Second,
		ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second,
	}
}

func TestDestXMLPolicyReal(t *testing.T) {
	b, err := New(realConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := backend.MachineSpec{MachineID: "polx1", Zone: "z1", VCPU: 1, MemoryMiB: 256}
	pl, err := b.Create(ctx, s)
	for i := 0; err != nil && errors.Is(err, backend.ErrHostUnavailable) && i < 50; i++ {
		time.Sleep(200 * time.Millisecond) // the first connection is made in the background
		pl, err = b.Create(ctx, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: "polx1", Zone: "z1", Placement: pl})
	})
	c, err := libvirt.NewConnect(os.Getenv("BIGFLEET_LIBVIRT_URI"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dom, err := c.LookupDomainByName(pl.Domain)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Free()
	x, err := dom.GetXMLDesc(libvirt.DOMAIN_XML_MIGRATABLE)
	if err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("BIGFLEET_DUMP_DIR"); d != "" {
		_ = os.WriteFile(d+"/migratable.xml", []byte(x), 0o644)
	}
	t.Logf("migratable XML:\n%s", x)
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	em, err := domxml.DefaultEmulator(c, d.Type)
	if err != nil {
		t.Fatal(err)
	}
	p := b.builder.policyFor(d.Type, d.Devices.Disks[0].Source.File.File, "", backend.Shape{})
	p.Emulator = em
	if err := p.CheckRendered(&d); err != nil {
		t.Fatalf("libvirt's rendering of our own domain is refused: %v", err)
	}
}
