package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

func writeHosts(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hosts.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fakeHostsDoc = `hosts:
  - name: kvm-a1
    zone: zone-a
    uri: test:///default
    fake: {vcpus: 16, memory_mib: 65536, pool_gib: 500}
  - name: kvm-a2
    zone: zone-a
    uri: test:///default
    cordoned: true
  - name: kvm-b1
    zone: zone-b
    uri: test:///default
    labels: {rack: r12}
`

func TestHostsFlagRefusals(t *testing.T) {
	t.Parallel()
	good := writeHosts(t, fakeHostsDoc)
	bad := writeHosts(t, "hosts:\n  - name: a\n    zone: z\n    uri: u\n    rack: r1\n")
	fake := "--use-fake-backend"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hosts=" + good, "--connect=qemu:///system"}, "--connect and --hosts are mutually exclusive"},
		{[]string{fake, "--hosts=" + good, "--fake-zones=a,b"}, "--hosts and --fake-zones are mutually exclusive"},
		{[]string{fake, "--placement=random"}, `--placement "random": want spread or pack`},
		{[]string{fake, "--placement="}, "--placement"},
		{[]string{fake, "--hosts=" + bad}, `hosts.yaml:5: unknown key "rack"`},
		{[]string{fake, "--hosts=/does/not/exist.yaml"}, "--hosts: open /does/not/exist.yaml"},
		// A fake: block is for the fake backend only.
		{[]string{"--hosts=" + good, "--image=golden"}, `host "kvm-a1": fake: only the fake backend reads it`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--addr=127.0.0.1:0", "--metrics-addr="}, tc.args...)
			err := run(t.Context(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%v) = %v; want an error mentioning %q", tc.args, err, tc.want)
			}
		})
	}
}

// The fake backend built from --hosts serves the file's hosts, sized by
// their fake: blocks (or the defaults), cordoned as the file says.
func TestFakeBackendFromHostsFile(t *testing.T) {
	t.Parallel()
	cfg := config{UseFakeBackend: true, HostsFile: writeHosts(t, fakeHostsDoc), Placement: "pack"}
	be, err := openBackend(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if z := be.Zones(); strings.Join(z, ",") != "zone-a,zone-b" {
		t.Fatalf("zones = %v", z)
	}
	hs := be.Hosts(t.Context())
	if len(hs) != 3 {
		t.Fatalf("hosts = %+v", hs)
	}
	a1, a2, b1 := hs[0], hs[1], hs[2]
	if a1.Name != "kvm-a1" || a1.Capacity.VCPUs != 16 || a1.Capacity.MemoryMiB != 65536 || a1.Cordoned {
		t.Errorf("kvm-a1 = %+v", a1)
	}
	if a2.Name != "kvm-a2" || !a2.Cordoned || a2.Capacity.VCPUs != 64 || a2.Capacity.MemoryMiB != 256*1024 {
		t.Errorf("kvm-a2 = %+v", a2)
	}
	if b1.Labels["rack"] != "r12" || b1.Zone != "zone-b" || !b1.Connected {
		t.Errorf("kvm-b1 = %+v", b1)
	}
	p, err := be.Create(t.Context(), backend.MachineSpec{MachineID: "m1", Zone: "zone-a", VCPU: 2, MemoryMiB: 2048})
	if err != nil || p.Host != "kvm-a1" || !strings.HasPrefix(p.Why, "pack: host kvm-a1") {
		t.Fatalf("create = %+v, %v (the cordoned kvm-a2 must get nothing)", p, err)
	}
}

// The real backend's hosts come from --hosts with their names, labels,
// ratios and cordon, capacity enforced; from --connect a zone named twice
// is a pool of two named hosts.
func TestLibvirtHosts(t *testing.T) {
	t.Parallel()
	doc := "hosts:\n  - name: kvm-a1\n    zone: zone-a\n    uri: qemu:///system\n    labels: {rack: r1}\n    overcommit: {cpu: 4}\n" +
		"  - name: kvm-a2\n    zone: zone-a\n    uri: qemu:///session\n    cordoned: true\n"
	hs, err := libvirtHosts(config{HostsFile: writeHosts(t, doc)})
	if err != nil || len(hs) != 2 {
		t.Fatalf("hosts %+v, %v", hs, err)
	}
	a1, a2 := hs[0], hs[1]
	if a1.Name != "kvm-a1" || !a1.Named || !a1.Enforce || a1.Labels["rack"] != "r1" || a1.CPUOvercommit != 4 || a1.MemoryOvercommit != 1 || a1.Cordoned {
		t.Errorf("kvm-a1 %+v", a1)
	}
	if a2.Name != "kvm-a2" || !a2.Cordoned || a2.Zone != "zone-a" {
		t.Errorf("kvm-a2 %+v", a2)
	}
	hs, err = libvirtHosts(config{Connect: "zone-a=qemu:///system,zone-a=qemu+tls://kvm2/system,zone-b=qemu:///system"})
	if err != nil || len(hs) != 3 {
		t.Fatalf("connect hosts %+v, %v", hs, err)
	}
	if hs[0].Name != "zone-a-system" || !hs[0].Named || hs[1].Name != "kvm2" || hs[2].Name != "zone-b" || hs[2].Named || hs[0].Enforce {
		t.Errorf("connect names %+v", hs)
	}
}
