package capacity

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// fullShapeJSON is the example of docs/configuration.md ("Machine shapes").
const fullShapeJSON = `[
 {"name": "kvm.node", "vcpu": 4, "memory_mib": 8192, "disk_gib": 40,
  "firmware": "uefi-secure", "tpm": true,
  "cpu": {"model": "host-passthrough", "sockets": 1, "cores": 2, "threads": 2},
  "hugepages": "2M",
  "network": [{"network": "default"}, {"bridge": "br0", "model": "e1000e"}]}
]`

func TestShapeParsed(t *testing.T) {
	t.Parallel()
	types, err := ParseInstanceTypes([]byte(fullShapeJSON))
	if err != nil {
		t.Fatal(err)
	}
	got := types[0].Shape()
	want := backend.Shape{DiskGiB: 40, Firmware: "uefi-secure", TPM: true,
		CPU:         backend.CPUShape{Model: "host-passthrough", Sockets: 1, Cores: 2, Threads: 2},
		HugePageKiB: 2048,
		NICs:        []backend.NIC{{Network: "default"}, {Bridge: "br0", Model: "e1000e"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("shape\n got %+v\nwant %+v", got, want)
	}
	// A type without shape fields has the zero shape (NICs nil: --network).
	plain, err := ParseInstanceTypes([]byte(`[{"name":"p","vcpu":1,"memory_mib":512}]`))
	if err != nil {
		t.Fatal(err)
	}
	if s := plain[0].Shape(); !reflect.DeepEqual(s, backend.Shape{}) {
		t.Fatalf("plain type's shape %+v", s)
	}
	// "network": [] is a type without any NIC, not --network's.
	none, err := ParseInstanceTypes([]byte(`[{"name":"p","vcpu":1,"memory_mib":512,"network":[]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if s := none[0].Shape(); s.NICs == nil || len(s.NICs) != 0 {
		t.Fatalf(`"network": [] gave NICs %#v`, s.NICs)
	}
}

func TestShapeRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ fields, want string }{
		{`"firmware":"efi"`, `instance type "t": firmware "efi": want bios, uefi or uefi-secure`},
		{`"disk_gib":-1`, "disk_gib -1"},
		{`"disk_gib":100000`, "disk_gib 100000"},
		{`"disk_gib":"8"`, "disk_gib"},
		{`"cpu":{"sockets":1,"cores":2,"threads":2}`, "cpu: sockets×cores×threads = 1×2×2 = 4, must equal vcpu 2"},
		{`"cpu":{"sockets":2}`, "cpu: sockets, cores and threads must all be > 0"},
		{`"cpu":{"model":"<evil/>"}`, `cpu.model "<evil/>"`},
		{`"cpu":{"modle":"x"}`, `unknown field "modle"`},
		{`"hugepages":"3M"`, `hugepages: "3M": a huge page size is a power of two`},
		{`"hugepages":"4K"`, `hugepages: "4K"`},
		{`"hugepages":"2X"`, `hugepages: "2X"`},
		{`"hugepages":"huge"`, `hugepages: "huge"`},
		{`"network":[{}]`, "network[0]: give network (a libvirt network) or bridge"},
		{`"network":[{"network":"a","bridge":"b"}]`, `network[0]: network "a" and bridge "b": give one of them`},
		{`"network":[{"network":"default"},{"network":"../x"}]`, `network[1]: network "../x"`},
		{`"network":[{"bridge":"averyveryverylongbridge"}]`, `network[0]: bridge "averyveryverylongbridge"`},
		{`"network":[{"network":"default","model":"ne2k"}]`, `network[0]: model "ne2k": want one of virtio, e1000, e1000e, rtl8139`},
		{`"tpm":"yes"`, "tpm"},
	} {
		data := `[{"name":"t","vcpu":2,"memory_mib":1024,` + tc.fields + `}]`
		_, err := ParseInstanceTypes([]byte(data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.fields, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "instance_types[0]") {
			t.Errorf("%s: %v does not name the entry", tc.fields, err)
		}
	}
}

func TestParseHugePageSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{"2M": 2048, "2MiB": 2048, "2MB": 2048, "1G": 1 << 20, "1GiB": 1 << 20,
		"2048K": 2048, "2048k": 2048, "64K": 64, "16G": 16 << 20} {
		if got, err := ParseHugePageSize(in); err != nil || got != want {
			t.Errorf("%q: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "0M", "3M", "4K", "32G", "-2M", "2", "2T", "1.5G", "99999999999999999999M"} {
		if kib, err := ParseHugePageSize(in); err == nil {
			t.Errorf("%q accepted as %d KiB", in, kib)
		}
	}
}

func TestLoadShapes(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "types.json")
	if err := os.WriteFile(p, []byte(fullShapeJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	shapes, mem, err := LoadShapes(p)
	if err != nil {
		t.Fatal(err)
	}
	if shapes["kvm.node"].Firmware != "uefi-secure" || mem["kvm.node"] != 8192 || !reflect.DeepEqual(shapes["kvm.small"], backend.Shape{}) {
		t.Fatalf("shapes %+v", shapes)
	}
	if err := os.WriteFile(p, []byte(`[{"name":"t","vcpu":1,"memory_mib":1,"firmware":"coreboot"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadShapes(p); err == nil || !strings.Contains(err.Error(), `--instance-types: instance_types[0]: instance type "t": firmware "coreboot"`) {
		t.Fatalf("bad firmware: %v", err)
	}
}

func FuzzParseHugePageSize(f *testing.F) {
	for _, s := range []string{"2M", "1G", "2048K", "3M", "", "1GiB", "0x10M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kib, err := ParseHugePageSize(s)
		if err != nil {
			return
		}
		if kib < 64 || kib > 16<<20 || kib&(kib-1) != 0 {
			t.Fatalf("%q accepted as %d KiB", s, kib)
		}
	})
}
