package shapecheck

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// Each shape a host cannot give fails naming the type, the field and the
// host: what the backend's CheckShapes stops the process with at startup.
func TestCheckOffersRefuses(t *testing.T) {
	t.Parallel()
	offers := Offers{
		Loaders: []string{domxml.OVMFCode}, TPMKnown: true, TPMEmulator: false,
		HugePages: map[uint64]hostconn.HugePages{2048: {Supported: true, TotalKiB: 512 << 10}, 1 << 20: {}, 16 << 10: {Supported: true}},
		Networks:  []string{"default"}, GoldenBytes: 10 << 30,
	}
	shapes := map[string]backend.Shape{
		"fw":    {Firmware: backend.FirmwareUEFISecure},
		"uefi":  {Firmware: backend.FirmwareUEFI},
		"tpm":   {TPM: true},
		"hp1g":  {HugePageKiB: 1 << 20},
		"hp2m":  {HugePageKiB: 2048},
		"hp16m": {HugePageKiB: 16 << 10},
		"net":   {NICs: []backend.NIC{{Network: "default"}, {Network: "lab-net"}}},
		"disk":  {DiskGiB: 8},
		"disk2": {DiskGiB: 10},
		"plain": {},
	}
	mem := map[string]int{"hp1g": 1024, "hp2m": 1024}
	err := Check("h1", shapes, mem, "", offers)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`instance type "fw": firmware uefi-secure: the host's QEMU offers no /usr/share/OVMF/OVMF_CODE_4M.secboot.fd (install Debian's ovmf package; it offers /usr/share/OVMF/OVMF_CODE_4M.fd) (host h1)`,
		`instance type "tpm": tpm: the host cannot emulate a TPM 2.0`,
		`instance type "hp1g": hugepages: the host's CPU has no 1G pages`,
		`instance type "hp2m": hugepages: the host has 512 MiB of 2M pages reserved, less than one machine's memory_mib 1024`,
		`instance type "hp16m": hugepages: the host has no 16M pages reserved`,
		`instance type "net": network[1]: no active libvirt network "lab-net" (active: default)`,
		`instance type "disk": disk_gib 8 is smaller than the golden image's virtual size (10.00 GiB)`,
	} {
		if !strings.Contains(err.Error(), "--instance-types: "+want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
	for _, fine := range []string{`"uefi"`, `"disk2"`, `"plain"`, "network[0]"} {
		if strings.Contains(err.Error(), fine) {
			t.Errorf("%s refused:\n%v", fine, err)
		}
	}
	// A host whose domain capabilities say nothing of TPMs is not refused
	// for one (an older libvirt): the start then says what is missing.
	if err := Check("h1", map[string]backend.Shape{"tpm": {TPM: true}}, nil, "", Offers{}); err != nil {
		t.Errorf("TPM unknown: %v", err)
	}
}

func TestSizedGolden(t *testing.T) {
	t.Parallel()
	g := volume.Golden{Capacity: 3 << 30}
	if got, err := Sized(g, "t", backend.Shape{}); err != nil || got.Capacity != 3<<30 {
		t.Fatalf("no disk_gib: %+v %v", got, err)
	}
	if got, err := Sized(g, "t", backend.Shape{DiskGiB: 8}); err != nil || got.Capacity != 8<<30 {
		t.Fatalf("disk_gib 8: %+v %v", got, err)
	}
	if _, err := Sized(g, "t", backend.Shape{DiskGiB: 2}); err == nil ||
		!strings.Contains(err.Error(), `instance type "t": disk_gib 2 is smaller than the golden image's virtual size (3.00 GiB)`) {
		t.Fatalf("disk_gib 2: %v", err)
	}
}

func TestOffersOfDomainCaps(t *testing.T) {
	t.Parallel()
	const x = `<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path><domain>kvm</domain><arch>x86_64</arch>
<os supported='yes'><loader supported='yes'><value>/usr/share/OVMF/OVMF_CODE_4M.fd</value><value>/usr/share/OVMF/OVMF_CODE_4M.secboot.fd</value></loader></os>
<devices><tpm supported='yes'><enum name='model'><value>tpm-tis</value><value>tpm-crb</value></enum>
<enum name='backendModel'><value>passthrough</value><value>emulator</value></enum>
<enum name='backendVersion'><value>1.2</value><value>2.0</value></enum></tpm></devices></domainCapabilities>`
	var dc libvirtxml.DomainCaps
	if err := dc.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	l, emu, known := offersOf(&dc)
	if len(l) != 2 || l[1] != domxml.OVMFSecureCode || !emu || !known {
		t.Fatalf("loaders %v emulator %v known %v", l, emu, known)
	}
	dc.Devices.TPM.Enums[1].Values = []string{"passthrough"} // no swtpm on the host
	if _, emu, _ := offersOf(&dc); emu {
		t.Fatal("TPM emulation offered without the emulator backend")
	}
}

// --network is checked once, for the types without a network list, when
// the host's networks were read for the others.
func TestCheckOffersNetworkFlag(t *testing.T) {
	t.Parallel()
	shapes := map[string]backend.Shape{"a": {}, "b": {}, "nics": {NICs: []backend.NIC{{Network: "default"}}}}
	err := Check("h1", shapes, nil, "gone", Offers{Networks: []string{"default"}})
	if err == nil || strings.Count(err.Error(), "--network") != 1 || !strings.Contains(err.Error(), `--network: no active libvirt network "gone"`) {
		t.Fatalf("got %v", err)
	}
	if err := Check("h1", shapes, nil, "default", Offers{Networks: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
}

// A CPU model the host cannot give is refused naming the field: host-
// passthrough off KVM, a model QEMU does not know or the host CPU cannot
// run.
func TestCheckOffersCPU(t *testing.T) {
	t.Parallel()
	const x = `<domainCapabilities><cpu><mode name='host-passthrough' supported='yes'/><mode name='host-model' supported='no'/>
<mode name='custom' supported='yes'><model usable='yes'>qemu64</model><model usable='no'>Icelake-Server</model></mode></cpu></domainCapabilities>`
	var dc libvirtxml.DomainCaps
	if err := dc.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	o := Offers{DomainType: "qemu"}
	o.CPUModes, o.CPUModels = cpuOffersOf(&dc)
	for model, want := range map[string]string{
		"host-passthrough": "cpu.model host-passthrough needs KVM, and the host runs qemu domains",
		"host-model":       "cpu.model host-model: the host's QEMU does not support that mode",
		"Haswell":          `cpu.model "Haswell": the host's QEMU has no such CPU model`,
		"Icelake-Server":   `cpu.model "Icelake-Server": not usable on this host`,
		"qemu64":           "",
		"":                 "",
	} {
		err := Check("h1", map[string]backend.Shape{"t": {CPU: backend.CPUShape{Model: model}}}, nil, "", o)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", model, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), `instance type "t": `+want)):
			t.Errorf("%q: %v, want %q", model, err, want)
		}
	}
	o.DomainType = "kvm"
	if err := Check("h1", map[string]backend.Shape{"t": {CPU: backend.CPUShape{Model: "host-passthrough"}}}, nil, "", o); err != nil {
		t.Errorf("host-passthrough on kvm: %v", err)
	}
}
