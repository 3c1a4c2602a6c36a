//go:build integration && shapes

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
)

// make test-shapes: the golden image of `make golden-image` (a real
// Debian 12 with systemd and qemu-guest-agent) booted from disk, no direct
// kernel, with three instance types. The times go to
// out/test-shapes-times.txt, which the make target prints.

var shapeTimes struct {
	sync.Mutex
	lines []string
}

func recordTime(format string, args ...any) {
	shapeTimes.Lock()
	defer shapeTimes.Unlock()
	shapeTimes.lines = append(shapeTimes.lines, fmt.Sprintf(format, args...))
	_ = os.MkdirAll("../../out", 0o755)
	_ = os.WriteFile("../../out/test-shapes-times.txt", []byte(strings.Join(shapeTimes.lines, "\n")+"\n"), 0o644)
}

// guestPoll runs a shell line in the guest until ok accepts its output or
// the budget ends (first boot's growpart may finish after the agent).
func guestPoll(t *testing.T, b *libvirt.Backend, pl backend.Placement, line string, budget time.Duration, ok func(string) bool) string {
	t.Helper()
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(budget)
	var last string
	for {
		res, err := c.RunHook(t.Context(), []string{"/bin/sh", "-c", line}, time.Minute)
		if err == nil && res.OK() {
			last = strings.TrimSpace(string(res.Stdout))
			if ok(last) {
				return last
			}
		} else {
			last = fmt.Sprintf("error %v %+v", err, res)
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(5 * time.Second)
	}
}

func TestGoldenShapes(t *testing.T) {
	e := loadEnv(t)
	golden := shapesGolden(t, e)
	userData := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(userData, []byte("#cloud-config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shapes := map[string]backend.Shape{
		"disk8":  {DiskGiB: 8},
		"secure": {Firmware: backend.FirmwareUEFISecure, TPM: true},
		"twonic": {NICs: []backend.NIC{{Network: e.Network}, {Network: e.Network}}},
	}
	b := newBackendWith(t, e, "it-shapes-golden", func(c *libvirt.Config) {
		c.Image, c.Kernel, c.Initrd, c.Cmdline, c.Shapes = golden, "", "", "", shapes
		c.BaseUserData = userData
	})
	if err := b.CheckShapes(t.Context()); err != nil {
		t.Fatalf("CheckShapes: %v", err)
	}
	boot := func(t *testing.T, typ string) backend.Placement {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
		defer cancel()
		id := uniq(typ)
		spec := backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: "local", InstanceType: typ, VCPU: 1, MemoryMiB: 1024}
		t0 := time.Now()
		pl, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatalf("Create %s: %v%s", typ, err, qemuLogTail(pl.Domain))
		}
		t.Cleanup(func() {
			_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl})
		})
		c, err := b.AgentClient(pl)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("%s: guest agent never answered (accelerator %s): %v%s", typ, accel.Accel, err, qemuLogTail(pl.Domain))
		}
		recordTime("test-shapes: %-7s boot to agent %s (accelerator %s)", typ, time.Since(t0).Round(time.Second), accel.Accel)
		return pl
	}
	t.Run("disk8", func(t *testing.T) {
		t0 := time.Now()
		pl := boot(t, "disk8")
		// growpart and resize2fs on first boot: the root file system ends
		// a little short of the disk (the boot and EFI partitions).
		size := guestPoll(t, b, pl, "df -B1 --output=size / | tail -n1", 5*time.Minute, func(s string) bool {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			return err == nil && n > 7<<30
		})
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n <= 7<<30 || n > 8<<30 {
			t.Fatalf("root file system %q bytes, want 7-8 GiB on a disk_gib 8 machine", size)
		}
		recordTime("test-shapes: disk8   root file system %.2f GiB after %s", float64(n)/(1<<30), time.Since(t0).Round(time.Second))
	})
	t.Run("secure", func(t *testing.T) {
		pl := boot(t, "secure")
		// The SecureBoot variable: 4 bytes of attributes, then 1 = enabled.
		sb := guestPoll(t, b, pl, "od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", time.Minute,
			func(s string) bool { return s != "" })
		if f := strings.Fields(sb); len(f) != 5 || f[4] != "1" {
			diag := guestPoll(t, b, pl, "ls /sys/firmware/efi/efivars | grep -i secure; dmesg | grep -i -e secureboot -e lockdown",
				time.Minute, func(string) bool { return true })
			t.Fatalf("SecureBoot efivar %q, want enabled; in the guest:\n%s", sb, diag)
		}
		if tpm := guestPoll(t, b, pl, "ls /sys/class/tpm", time.Minute, func(s string) bool { return s != "" }); !strings.Contains(tpm, "tpm0") {
			t.Fatalf("guest TPMs %q", tpm)
		}
		if out := guestPoll(t, b, pl, "mokutil --sb-state 2>&1 || true", time.Minute, func(string) bool { return true }); out != "" {
			recordTime("test-shapes: secure  mokutil --sb-state: %s", out)
		}
	})
	t.Run("twonic", func(t *testing.T) {
		pl := boot(t, "twonic")
		nics := guestPoll(t, b, pl, "ls /sys/class/net | grep -v '^lo$' | sort | tr '\\n' ' '", 2*time.Minute,
			func(s string) bool { return len(strings.Fields(s)) >= 2 })
		if len(strings.Fields(nics)) != 2 {
			t.Fatalf("guest NICs %q, want 2", nics)
		}
		recordTime("test-shapes: twonic  guest NICs %s", nics)
	})
}

// A disk smaller than the golden image cannot hold it: the check bin/libvirt
// runs at startup (CheckShapes) refuses the type, naming it and the field.
func TestGoldenShapesRefuseSmallDisk(t *testing.T) {
	e := loadEnv(t)
	golden := shapesGolden(t, e)
	b := newBackendWith(t, e, "it-shapes-small", func(c *libvirt.Config) {
		c.Image, c.Kernel, c.Initrd, c.Cmdline = golden, "", "", ""
		c.Shapes = map[string]backend.Shape{"small": {DiskGiB: 2}}
	})
	err := b.CheckShapes(t.Context())
	want := `instance type "small": disk_gib 2 is smaller than the golden image's virtual size`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckShapes = %v, want %q", err, want)
	}
}

// shapesGolden is the pool volume of make test-shapes' image
// (BIGFLEET_SHAPES_IMAGE); the test is skipped without one.
func shapesGolden(t *testing.T, e env) string {
	t.Helper()
	image := os.Getenv("BIGFLEET_SHAPES_IMAGE")
	if image == "" {
		t.Skip("BIGFLEET_SHAPES_IMAGE is not set: run make test-shapes")
	}
	return goldenPoolVolume(t, e, image)
}
