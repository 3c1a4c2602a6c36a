package guestfit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// capsXML is the shape of a QEMU host's capabilities: machine types per
// architecture (aliases carry canonical=), domain types, and kvm with a
// list of its own when it differs.
func capsXML(machines []libvirtxml.CapsGuestMachine, kvm ...libvirtxml.CapsGuestMachine) string {
	domains := []libvirtxml.CapsGuestDomain{{Type: "qemu"}}
	if kvm != nil {
		domains = append(domains, libvirtxml.CapsGuestDomain{Type: "kvm", Machines: kvm})
	}
	c := libvirtxml.Caps{Guests: []libvirtxml.CapsGuest{
		{OSType: "hvm", Arch: libvirtxml.CapsGuestArch{Name: "i686", Machines: []libvirtxml.CapsGuestMachine{{Name: "pc-i440fx-99.0"}}, Domains: domains}},
		{OSType: "hvm", Arch: libvirtxml.CapsGuestArch{Name: "x86_64", Machines: machines, Domains: domains}},
	}}
	s, err := c.Marshal()
	if err != nil {
		panic(err)
	}
	return s
}

func qemuMachines(version string, older ...string) []libvirtxml.CapsGuestMachine {
	m := []libvirtxml.CapsGuestMachine{
		{Name: "pc", Canonical: "pc-i440fx-" + version},
		{Name: "pc-i440fx-" + version},
		{Name: "q35", Canonical: "pc-q35-" + version},
		{Name: "pc-q35-" + version},
	}
	for _, o := range older {
		m = append(m, libvirtxml.CapsGuestMachine{Name: "pc-i440fx-" + o}, libvirtxml.CapsGuestMachine{Name: "pc-q35-" + o})
	}
	return m
}

var (
	qemu72  = capsXML(qemuMachines("7.2", "7.1", "7.0", "6.2", "2.12"))        // Debian 12
	qemu100 = capsXML(qemuMachines("10.0", "9.2", "9.1", "8.0", "7.2", "7.1")) // Debian 13
)

func parse(t *testing.T, s string) *libvirtxml.Caps {
	t.Helper()
	var c libvirtxml.Caps
	if err := c.Unmarshal(s); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestOfReadsMachineAndCPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xml  string
		want Guest
	}{
		{`<domain type='qemu'><name>d</name><os><type arch='x86_64' machine='pc-i440fx-10.0'>hvm</type></os>
		  <cpu mode='custom' match='exact' check='none'><model fallback='forbid'>qemu64</model></cpu></domain>`,
			Guest{Arch: "x86_64", Machine: "pc-i440fx-10.0", CPUMode: "custom", CPUModel: "qemu64"}},
		{`<domain type='kvm'><name>d</name><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os><cpu mode='host-passthrough'/></domain>`,
			Guest{Arch: "x86_64", Machine: "pc-q35-7.2", CPUMode: "host-passthrough"}},
		{`<domain type='qemu'><name>d</name><os><type>hvm</type></os><cpu><model>Skylake-Client</model></cpu></domain>`,
			Guest{CPUMode: "custom", CPUModel: "Skylake-Client"}},
		{`<domain type='test'><name>d</name><os><type>hvm</type></os></domain>`, Guest{}},
	} {
		var d libvirtxml.Domain
		if err := d.Unmarshal(tc.xml); err != nil {
			t.Fatal(err)
		}
		if got := Of(&d); got != tc.want {
			t.Errorf("Of = %+v, want %+v", got, tc.want)
		}
	}
}

// Issue 38 item 7: a domain defined on libvirt 11.3 (QEMU 10) has
// pc-i440fx-10.0, which QEMU 7.2 cannot run; one defined on 9.0 has
// pc-i440fx-7.2, which QEMU 10 still offers.
func TestMachineTypeAcrossVersions(t *testing.T) {
	t.Parallel()
	old, cur := parse(t, qemu72), parse(t, qemu100)
	for _, tc := range []struct {
		caps    *libvirtxml.Caps
		machine string
		refused string // "" = runs
	}{
		{old, "pc-i440fx-10.0", "its QEMU does not support machine type pc-i440fx-10.0 (it offers …, pc-i440fx-7.0, pc-i440fx-7.1, pc-i440fx-7.2)"},
		{old, "pc-q35-10.0", "machine type pc-q35-10.0"},
		{old, "pc-i440fx-7.2", ""},
		{cur, "pc-i440fx-7.2", ""},
		{cur, "pc-i440fx-10.0", ""},
		{old, "pc", ""}, // an alias: whatever pc is there
		{old, "", ""},   // no machine type named
		{old, "virt-7.2", "none of the virt family"},
	} {
		why := MachinesOf(tc.caps, "x86_64", "qemu").refuses(tc.machine)
		if (tc.refused == "") != (why == "") || !strings.Contains(why, tc.refused) {
			t.Errorf("%s: refuses = %q, want %q", tc.machine, why, tc.refused)
		}
	}
	// The wrong architecture's list is not consulted, nor another domain
	// type's own list.
	if why := MachinesOf(old, "x86_64", "qemu").refuses("pc-i440fx-99.0"); why == "" {
		t.Error("an i686 machine type counted for x86_64")
	}
	kvmOwn := parse(t, capsXML(qemuMachines("10.0"), libvirtxml.CapsGuestMachine{Name: "pc-i440fx-7.2"}))
	if why := MachinesOf(kvmOwn, "x86_64", "kvm").refuses("pc-i440fx-10.0"); why == "" {
		t.Error("kvm's own machine list was ignored")
	}
	if why := MachinesOf(kvmOwn, "x86_64", "qemu").refuses("pc-i440fx-10.0"); why != "" {
		t.Errorf("qemu on the same host: %s", why)
	}
	// A driver that lists no machine types (the test driver) cannot judge.
	if why := MachinesOf(parse(t, capsXML(nil)), "x86_64", "qemu").refuses("pc-i440fx-10.0"); why != "" {
		t.Errorf("no machine list: %s", why)
	}
}

func TestCPURefusals(t *testing.T) {
	t.Parallel()
	dc := libvirtxml.DomainCaps{CPU: &libvirtxml.DomainCapsCPU{Modes: []libvirtxml.DomainCapsCPUMode{
		{Name: "host-passthrough", Supported: "no"},
		{Name: "host-model", Supported: "yes"},
		{Name: "custom", Supported: "yes", Models: []libvirtxml.DomainCapsCPUModel{
			{Name: "qemu64", Usable: "yes"}, {Name: "Skylake-Client", Usable: "no"}, {Name: "EPYC", Usable: "unknown"}}},
	}}}
	cpus := CPUsOf(&dc)
	for _, tc := range []struct {
		g       Guest
		refused string
	}{
		{Guest{CPUMode: "custom", CPUModel: "qemu64"}, ""},
		{Guest{CPUMode: "custom", CPUModel: "EPYC"}, ""},
		{Guest{CPUMode: "custom", CPUModel: "Skylake-Client"}, "usable=no"},
		{Guest{CPUMode: "custom", CPUModel: "Cooperlake", Machine: "pc-i440fx-7.2"}, "no CPU model Cooperlake for machine type pc-i440fx-7.2"},
		{Guest{CPUMode: "host-passthrough"}, "does not support CPU mode host-passthrough"},
		{Guest{CPUMode: "host-model"}, ""},
		{Guest{}, ""},
	} {
		why := cpus.refuses(tc.g)
		if (tc.refused == "") != (why == "") || !strings.Contains(why, tc.refused) {
			t.Errorf("%+v: refuses = %q, want %q", tc.g, why, tc.refused)
		}
	}
	if why := CPUsOf(&libvirtxml.DomainCaps{}).refuses(Guest{CPUMode: "custom", CPUModel: "x"}); why != "" {
		t.Errorf("no CPU section: %s", why)
	}
}

// fakeSource counts its reads and answers from fields.
type fakeSource struct {
	caps, domcaps string
	capsErr       error
	domErr        error
	capsCalls     int
	domCalls      int
	asked         string // the last domain capabilities request
}

func (f *fakeSource) GetCapabilities() (string, error) {
	f.capsCalls++
	return f.caps, f.capsErr
}

func (f *fakeSource) GetDomainCapabilities(_, arch, machine, virttype string, _ libvirt.ConnectGetDomainCapabilitiesFlags) (string, error) {
	f.domCalls++
	f.asked = arch + "/" + machine + "/" + virttype
	return f.domcaps, f.domErr
}

const qemu64Caps = `<domainCapabilities><cpu><mode name='custom' supported='yes'><model usable='yes'>qemu64</model></mode></cpu></domainCapabilities>`

func TestCacheReadsOncePerConnection(t *testing.T) {
	t.Parallel()
	src := &fakeSource{caps: qemu72, domcaps: qemu64Caps}
	var c Cache
	link := time.Unix(100, 0)
	g := Guest{Arch: "x86_64", Machine: "pc-i440fx-7.2", CPUMode: "custom", CPUModel: "qemu64"}
	for range 3 {
		if v, err := c.Refuses(link, src, g, "qemu"); v != (Verdict{}) || err != nil {
			t.Fatalf("refuses = %+v, %v", v, err)
		}
	}
	if src.capsCalls != 1 || src.domCalls != 1 || src.asked != "x86_64/pc-i440fx-7.2/qemu" {
		t.Fatalf("reads on one connection: caps %d, domcaps %d (%s); want 1, 1", src.capsCalls, src.domCalls, src.asked)
	}
	// A guest refused by its machine type never costs a domain capabilities
	// read (libvirt would fail it: no such machine).
	g10 := g
	g10.Machine = "pc-i440fx-10.0"
	if v, err := c.Refuses(link, src, g10, "qemu"); err != nil || !strings.Contains(v.Refused, "pc-i440fx-10.0") {
		t.Fatalf("10.0 on QEMU 7.2: %+v, %v", v, err)
	}
	if src.domCalls != 1 {
		t.Fatalf("domain capabilities read for a refused machine type")
	}
	// A reconnect (a new daemon, perhaps upgraded) reads them again.
	src.caps = qemu100
	if v, err := c.Refuses(time.Unix(200, 0), src, g10, "qemu"); v != (Verdict{}) || err != nil {
		t.Fatalf("after the upgrade: %+v, %v", v, err)
	}
	if src.capsCalls != 2 || src.domCalls != 2 {
		t.Fatalf("after a reconnect: caps %d, domcaps %d; want 2, 2", src.capsCalls, src.domCalls)
	}
}

func TestCacheErrors(t *testing.T) {
	t.Parallel()
	g := Guest{Arch: "x86_64", Machine: "pc-i440fx-7.2", CPUMode: "custom", CPUModel: "qemu64"}
	down := errors.New("connection reset")
	var c Cache
	if _, err := c.Refuses(time.Unix(1, 0), &fakeSource{capsErr: down}, g, "qemu"); !errors.Is(err, down) || !strings.Contains(err.Error(), "read capabilities") {
		t.Errorf("capabilities error: %v", err)
	}
	var c2 Cache
	if _, err := c2.Refuses(time.Unix(1, 0), &fakeSource{caps: qemu72, domErr: down}, g, "qemu"); !errors.Is(err, down) || !strings.Contains(err.Error(), "machine pc-i440fx-7.2") {
		t.Errorf("domain capabilities error: %v", err)
	}
	// A host that will not answer domain capabilities (the test driver has
	// none; polkit denies connect.write to the provider on libssh hosts)
	// leaves the CPU unjudged, said so, not refused, and is asked once per
	// connection; the machine type is still judged from the capabilities.
	for _, cause := range []libvirt.Error{
		{Code: libvirt.ERR_NO_SUPPORT, Message: "this function is not supported by the connection driver: virConnectGetDomainCapabilities"},
		{Code: libvirt.ERR_ACCESS_DENIED, Message: "access denied: 'bigfleet' is not permitted to 'write' 'connect'"},
	} {
		var c3 Cache
		src := &fakeSource{caps: qemu72, domErr: cause}
		for range 2 {
			v, err := c3.Refuses(time.Unix(1, 0), src, g, "qemu")
			if v.Refused != "" || err != nil || !strings.Contains(v.Unchecked, cause.Message) {
				t.Errorf("%s: %+v, %v", cause.Message, v, err)
			}
		}
		if src.domCalls != 1 {
			t.Errorf("%s: asked %d times on one connection", cause.Message, src.domCalls)
		}
		g10 := g
		g10.Machine = "pc-i440fx-10.0"
		if v, _ := c3.Refuses(time.Unix(1, 0), src, g10, "qemu"); v.Refused == "" {
			t.Errorf("%s: the machine type went unjudged", cause.Message)
		}
	}
}

func TestFamilyOrdersVersions(t *testing.T) {
	t.Parallel()
	got := family([]string{"pc-i440fx-10.0", "pc-i440fx-9.2", "pc-i440fx-2.12", "pc-i440fx-9.10", "pc-q35-10.0"}, "pc-i440fx-11.0")
	if got != "…, pc-i440fx-9.2, pc-i440fx-9.10, pc-i440fx-10.0" {
		t.Errorf("family = %q", got)
	}
}
