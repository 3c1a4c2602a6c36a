package hostsfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `hosts:
  - name: kvm-a1
    zone: zone-a
    uri: qemu+ssh://bigfleet@kvm-a1.example/system?keyfile=/etc/bigfleet/ssh/id_ed25519
    labels: {rack: r12}
    overcommit: {cpu: 4.0, memory: 1.5}
  - name: kvm-a2
    zone: zone-a
    uri: qemu:///system
    cordoned: true
    fake: {vcpus: 16, memory_mib: 65536, pool_gib: 500}
  - name: kvm-b1
    zone: zone-b
    uri: qemu:///session
`

func TestParseGood(t *testing.T) {
	f, err := Parse("hosts.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hosts) != 3 {
		t.Fatalf("hosts = %d, want 3", len(f.Hosts))
	}
	a1, a2, b1 := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	if a1.Name != "kvm-a1" || a1.Zone != "zone-a" || a1.Labels["rack"] != "r12" || a1.Line != 2 {
		t.Errorf("a1 = %+v", a1)
	}
	if a1.Overcommit.CPU != 4 || a1.Overcommit.Memory != 1.5 || a1.Fake != nil || a1.Cordoned {
		t.Errorf("a1 overcommit/fake/cordoned = %+v", a1)
	}
	if !a2.Cordoned || a2.Fake == nil || *a2.Fake != (Fake{VCPUs: 16, MemoryMiB: 65536, PoolGiB: 500}) || a2.Line != 7 {
		t.Errorf("a2 = %+v", a2)
	}
	if b1.Overcommit != (Overcommit{CPU: 1, Memory: 1}) {
		t.Errorf("default overcommit = %+v, want 1/1", b1.Overcommit)
	}
	if got := b1.FakeSize(); got != (Fake{VCPUs: 64, MemoryMiB: 256 * 1024, PoolGiB: DefaultFakePoolGiB}) {
		t.Errorf("default fake size = %+v", got)
	}
	if z := f.Zones(); strings.Join(z, ",") != "zone-a,zone-b" {
		t.Errorf("zones = %v", z)
	}
	if h := f.HasFake(); h == nil || h.Name != "kvm-a2" {
		t.Errorf("HasFake = %v", h)
	}
}

// Every refusal names the file, the line and the key at fault.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown host key", "hosts:\n  - name: a\n    zone: z\n    uri: test:///default\n    rack: r1\n", `h.yaml:5: unknown key "rack" in a host`},
		{"unknown top key", "hosts: []\nzones: []\n", `h.yaml:2: unknown key "zones" in the top level`},
		{"unknown overcommit key", "hosts:\n  - name: a\n    zone: z\n    uri: u\n    overcommit: {disk: 2}\n", `h.yaml:5: unknown key "disk" in overcommit`},
		{"unknown fake key", "hosts:\n  - name: a\n    zone: z\n    uri: u\n    fake:\n      gpus: 2\n", `h.yaml:6: unknown key "gpus" in fake`},
		{"missing name", "hosts:\n  - zone: z\n    uri: u\n", `h.yaml:2: host "": name: required`},
		{"bad name", "hosts:\n  - name: KVM_1\n    zone: z\n    uri: u\n", `h.yaml:2: host "KVM_1": name: want lower-case`},
		{"duplicate", "hosts:\n  - name: a\n    zone: z\n    uri: u\n  - name: a\n    zone: z\n    uri: v\n", `h.yaml:5: host "a": name: already used by the host on line 2`},
		{"missing zone", "hosts:\n  - name: a\n    uri: u\n", `h.yaml:2: host "a": zone: required`},
		{"missing uri", "hosts:\n  - name: a\n    zone: z\n", `h.yaml:2: host "a": uri: required`},
		{"negative overcommit", "hosts:\n  - name: a\n    zone: z\n    uri: u\n    overcommit: {cpu: -1}\n", `host "a": overcommit.cpu: must be > 0`},
		{"wrong type", "hosts:\n  - name: a\n    zone: z\n    uri: u\n    cordoned: maybe\n", "h.yaml:5: cannot unmarshal !!str `maybe` into bool"},
		{"no hosts", "hosts: []\n", `h.yaml: no hosts listed`},
		{"empty", "", `h.yaml: empty file`},
		{"not a list", "hosts: {a: 1}\n", `h.yaml:1: hosts: want a list`},
		{"syntax", "hosts:\n  - name: [\n", `--hosts h.yaml: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("h.yaml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "--hosts h.yaml") {
				t.Errorf("err %q does not start with the flag and file", err)
			}
		})
	}
}

// JSON is YAML: a file written by a JSON encoder (as the integration tests
// do) parses the same, lines and all.
func TestParseJSON(t *testing.T) {
	doc := `{"hosts":[{"name":"system","zone":"pool","uri":"qemu:///system","labels":{"daemon":"system"},"overcommit":{"cpu":0.5,"memory":1}},` +
		"\n" + `{"name":"session","zone":"pool","uri":"qemu:///session","cordoned":true}]}`
	f, err := Parse("h.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hosts) != 2 || f.Hosts[0].Overcommit.CPU != 0.5 || !f.Hosts[1].Cordoned || f.Hosts[1].Line != 2 {
		t.Fatalf("hosts %+v", f.Hosts)
	}
	if _, err := Parse("h.json", []byte(`{"hosts":[{"name":"a","zone":"z","uri":"u","gpu":1}]}`)); err == nil ||
		!strings.Contains(err.Error(), `h.json:1: unknown key "gpu" in a host`) {
		t.Fatalf("unknown key in JSON: %v", err)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts.yaml")
	if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil || len(f.Hosts) != 3 || f.Path != p {
		t.Fatalf("Load = %+v, %v", f, err)
	}
	if _, err := Load(p + ".missing"); err == nil || !strings.Contains(err.Error(), "--hosts") {
		t.Fatalf("missing file: err = %v", err)
	}
}

// FuzzParse: any input either parses into valid hosts or fails with a
// message naming the flag; it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("hosts: []\n"))
	f.Add([]byte("hosts:\n  - name: a\n    zone: z\n    uri: u\n    overcommit: {cpu: .nan}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Parse("f.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--hosts f.yaml") {
				t.Fatalf("error without the flag and file: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, h := range out.Hosts {
			if !nameRE.MatchString(h.Name) || seen[h.Name] || h.Zone == "" {
				t.Fatalf("invalid host accepted: %+v", h)
			}
			seen[h.Name] = true
			if h.Overcommit.CPU <= 0 || h.Overcommit.Memory <= 0 {
				t.Fatalf("ratio not positive: %+v", h.Overcommit)
			}
		}
	})
}
