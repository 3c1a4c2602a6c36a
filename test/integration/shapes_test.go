//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
)

// Machine shapes of instance types against the real libvirtd and QEMU of
// scripts/libvirt-env.sh (its test guest boots a kernel directly, which
// OVMF does as well as SeaBIOS).

// shapedGuest creates a machine of instance type typ (shaped by shapes)
// and deletes it at cleanup; wantAgent waits for the guest agent.
func shapedGuest(t *testing.T, b *libvirt.Backend, id, typ string, memMiB int, wantAgent bool) backend.Placement {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	spec := backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: "local", InstanceType: typ, VCPU: 1, MemoryMiB: memMiB}
	t0 := time.Now()
	pl, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create %s: %v%s", typ, err, qemuLogTail(pl.Domain))
	}
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl})
	})
	created := time.Since(t0)
	if wantAgent {
		c, err := b.AgentClient(pl)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("%s: guest agent never answered (accelerator %s): %v%s", typ, accel.Accel, err, qemuLogTail(pl.Domain))
		}
	}
	t.Logf("%s: Create %s, agent after %s (accelerator %s)", typ, created.Round(time.Millisecond),
		time.Since(t0).Round(time.Millisecond), accel.Accel)
	return pl
}

func domainXML(t *testing.T, e env, domain string) *libvirtxml.Domain {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(virsh(t, e, "dumpxml", "--inactive", domain)); err != nil { // the definition: a running NIC shows as its bridge
		t.Fatalf("dumpxml %s: %v", domain, err)
	}
	return &d
}

// guestSh runs a shell line in the test guest (busybox sh) with guest-exec.
func guestSh(t *testing.T, b *libvirt.Backend, pl backend.Placement, line string) string {
	t.Helper()
	c, err := b.AgentClient(pl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunHook(t.Context(), []string{"/bin/sh", "-c", line}, 30*time.Second)
	if err != nil || !res.OK() {
		t.Fatalf("sh -c %q: %v %+v", line, err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// A disk_gib type's overlay is that size (the guest sees the disk at that
// size); a type with two NICs has both in its domain and its guest sees
// two network controllers on its PCI bus, of the two models asked.
func TestShapeDiskAndTwoNICs(t *testing.T) {
	e := loadEnv(t)
	if e.Network == "" {
		t.Skip("the env has no network")
	}
	shapes := map[string]backend.Shape{"shaped": {DiskGiB: 1,
		NICs: []backend.NIC{{Network: e.Network}, {Network: e.Network, Model: "e1000"}}}}
	b := newBackendWith(t, e, "it-shape-disk", func(c *libvirt.Config) { c.Shapes = shapes })
	if err := b.CheckShapes(t.Context()); err != nil {
		t.Fatalf("CheckShapes: %v", err)
	}
	pl := shapedGuest(t, b, uniq("disk"), "shaped", 128, true)
	vol := virsh(t, e, "vol-info", "--bytes", "--pool", e.Pool, pl.Domain+".qcow2")
	if m := regexp.MustCompile(`Capacity:\s+(\d+) bytes`).FindStringSubmatch(vol); m == nil || m[1] != strconv.Itoa(1<<30) {
		t.Fatalf("overlay of a disk_gib 1 type:\n%s", vol)
	}
	if sectors := guestSh(t, b, pl, "cat /sys/block/vda/size"); sectors != strconv.Itoa(1<<30/512) {
		t.Fatalf("the guest's vda is %s sectors, want %d", sectors, 1<<30/512)
	}
	d := domainXML(t, e, pl.Domain)
	var got []string
	for _, n := range d.Devices.Interfaces {
		s := "?"
		if n.Source != nil && n.Source.Network != nil && n.Model != nil {
			s = n.Source.Network.Network + "/" + n.Model.Type
		}
		got = append(got, s)
	}
	if want := []string{e.Network + "/virtio", e.Network + "/e1000"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("interfaces %v, want %v:\n%s", got, want, virsh(t, e, "dumpxml", pl.Domain))
	}
	// PCI class 0x0200xx: Ethernet controllers (the test guest loads no
	// NIC driver, so it counts devices, not interfaces).
	if got := guestSh(t, b, pl, "grep -c '^0x0200' /sys/bus/pci/devices/*/class | grep -c ':1$'"); got != "2" {
		t.Fatalf("the guest sees %s network controllers, want 2", got)
	}
}

// A uefi type with a TPM boots the guest through OVMF (the guest has
// /sys/firmware/efi) with an emulated TPM; the domain's NVRAM copy and
// the swtpm state are on the host while it lives and gone after Delete.
// A uefi-secure type defines and starts (Secure Boot with the test
// guest's unsigned direct kernel is make test-shapes' job, on the golden
// image); its NVRAM goes with it too.
func TestShapeUEFIAndTPM(t *testing.T) {
	e := loadEnv(t)
	for _, f := range []string{domxml.OVMFCode, domxml.OVMFSecureVars} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("scripts/libvirt-env.sh installs ovmf: %v", err)
		}
	}
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Fatalf("scripts/libvirt-env.sh installs swtpm: %v", err)
	}
	shapes := map[string]backend.Shape{
		"uefi-tpm": {Firmware: backend.FirmwareUEFI, TPM: true, CPU: backend.CPUShape{Sockets: 1, Cores: 1, Threads: 1}},
		"secure":   {Firmware: backend.FirmwareUEFISecure, TPM: true},
	}
	b := newBackendWith(t, e, "it-shape-uefi", func(c *libvirt.Config) { c.Shapes = shapes })
	if err := b.CheckShapes(t.Context()); err != nil {
		t.Fatalf("CheckShapes: %v", err)
	}
	id := uniq("uefi")
	pl := shapedGuest(t, b, id, "uefi-tpm", 256, true)
	if got := guestSh(t, b, pl, "test -d /sys/firmware/efi && echo uefi || echo bios"); got != "uefi" {
		t.Fatalf("the guest booted %s", got)
	}
	d := domainXML(t, e, pl.Domain)
	if d.OS.Loader == nil || d.OS.Loader.Path != domxml.OVMFCode || d.OS.NVRam == nil || d.OS.NVRam.NVRam == "" ||
		len(d.Devices.TPMs) != 1 || d.Devices.TPMs[0].Model != "tpm-crb" {
		t.Fatalf("domain: loader %+v nvram %+v tpms %+v", d.OS.Loader, d.OS.NVRam, d.Devices.TPMs)
	}
	// No cpu.model: host-passthrough on KVM, the hypervisor's model on TCG.
	wantMode := map[string]string{"kvm": "host-passthrough", "qemu": ""}[e.DomainType]
	if d.CPU == nil || d.CPU.Topology == nil || d.CPU.Topology.Sockets != 1 || d.CPU.Topology.Cores != 1 ||
		(e.DomainType != "auto" && d.CPU.Mode != wantMode && !(wantMode == "" && d.CPU.Mode == "custom")) {
		t.Fatalf("domain cpu %+v (domain type %s)", d.CPU, e.DomainType)
	}
	nvram := d.OS.NVRam.NVRam
	tpmState := filepath.Join("/var/lib/libvirt/swtpm", d.UUID)
	for _, p := range []string{nvram, tpmState} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("while the machine lives: %v", err)
		}
	}
	// Debian's kernel has the CRB TPM driver built in.
	if tpm := guestSh(t, b, pl, "ls /sys/class/tpm 2>/dev/null; true"); tpm != "tpm0" {
		t.Fatalf("the guest's TPMs: %q, want tpm0", tpm)
	}
	if err := b.Delete(t.Context(), backend.DeleteSpec{MachineID: id, Zone: "local", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{nvram, tpmState} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("after Delete, %s: %v (want it gone)", p, err)
		}
	}

	sid := uniq("secure")
	spl := shapedGuest(t, b, sid, "secure", 256, false)
	sd := domainXML(t, e, spl.Domain)
	if sd.OS.Loader == nil || sd.OS.Loader.Secure != "yes" || sd.OS.Loader.Path != domxml.OVMFSecureCode ||
		sd.OS.NVRam == nil || sd.OS.NVRam.Template != domxml.OVMFSecureVars || sd.Features == nil || sd.Features.SMM == nil {
		t.Fatalf("secure domain: loader %+v nvram %+v features %+v", sd.OS.Loader, sd.OS.NVRam, sd.Features)
	}
	if state := virsh(t, e, "domstate", spl.Domain); state != "running" {
		t.Fatalf("secure domain is %q", state)
	}
	if err := b.Delete(t.Context(), backend.DeleteSpec{MachineID: sid, Zone: "local", Placement: spl}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sd.OS.NVRam.NVRam); !os.IsNotExist(err) {
		t.Fatalf("after Delete, %s: %v (want it gone)", sd.OS.NVRam.NVRam, err)
	}
}

// bin/libvirt refuses to start when a type's shape is more than the host
// can give: each message names the type and the field.
func TestShapeRefusedAtStartup(t *testing.T) {
	e := loadEnv(t)
	bin := filepath.Join(t.TempDir(), "libvirt")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/libvirt").CombinedOutput(); err != nil {
		t.Fatalf("build bin/libvirt: %v\n%s", err, out)
	}
	for name, tc := range map[string]struct{ typ, want string }{
		"unknown network": {`"network": [{"network": "bf-no-such-net"}]`,
			`instance type "bad": network[0]: no active libvirt network "bf-no-such-net"`},
		"hugepages the host lacks": {`"hugepages": "1G"`, `instance type "bad": hugepages: the host`},
		"unknown CPU model": {`"cpu": {"model": "NoSuchCPU-v9"}`,
			`instance type "bad": cpu.model "NoSuchCPU-v9": the host's QEMU has no such CPU model`},
		"unknown firmware": {`"firmware": "coreboot"`, `instance type "bad": firmware "coreboot": want bios, uefi or uefi-secure`},
	} {
		t.Run(name, func(t *testing.T) {
			types := filepath.Join(t.TempDir(), "types.json")
			data := `[{"name": "bad", "vcpu": 1, "memory_mib": 1024, ` + tc.typ + `}]`
			if err := os.WriteFile(types, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "--addr=127.0.0.1:0", "--metrics-addr=", "--provider=it-shape-refuse",
				"--connect="+e.URI, "--image="+e.Image, "--storage-pool="+e.Pool, "--network="+e.Network,
				"--instance-types="+types, "--domain-type="+e.DomainType, "--log-format=text", callTimeoutArg)
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("started (err %v, ctx %v):\n%s", err, ctx.Err(), out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("exit %v without naming the field (%q):\n%s", err, tc.want, out)
			}
		})
	}
}

// Placement reads the host's free huge pages (virNodeGetFreePages): on a
// host with none of 2M reserved, a type backed by them fits no host, and
// its Create fails for capacity without touching libvirt.
func TestShapeHugePagesPlacement(t *testing.T) {
	e := loadEnv(t)
	if b, err := os.ReadFile("/proc/sys/vm/nr_hugepages"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Skipf("the host has 2M huge pages reserved (%q, %v): this test needs none", b, err)
	}
	shapes := map[string]backend.Shape{"huge": {HugePageKiB: 2048}}
	b := newBackendWith(t, e, "it-shape-huge", func(c *libvirt.Config) { c.Shapes = shapes })
	// The host reads its size (free huge pages included) just after it
	// counts as connected; a Create placed in between is caught by the
	// shape check on the host instead (another error). Hosts reads it.
	waitUntil(t, 30*time.Second, "the host's size read", func() bool {
		hs := b.Hosts(t.Context())
		return len(hs) == 1 && hs[0].Capacity.MemoryMiB > 0
	})
	id := uniq("huge")
	spec := backend.MachineSpec{MachineID: id, OperationID: "op-" + id, Zone: "local", InstanceType: "huge", VCPU: 1, MemoryMiB: 128}
	_, err := b.Create(t.Context(), spec)
	if !errors.Is(err, backend.ErrNoCapacity) || !strings.Contains(err.Error(), "of 2048 KiB huge pages") {
		t.Fatalf("Create of a 2M huge page type on a host without them: %v", err)
	}
	if err := b.CheckShapes(t.Context()); err == nil || !strings.Contains(err.Error(), `instance type "huge": hugepages: the host has no 2M pages reserved`) {
		t.Fatalf("CheckShapes: %v", err)
	}
}
