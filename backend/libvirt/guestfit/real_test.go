package guestfit

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The testdata files are what the lab's hosts answered (make test-lab,
// virsh capabilities / domcapabilities --virttype qemu --machine
// pc-i440fx-7.2 inside lab4, Debian 12, libvirt 9.0, QEMU 7.2, and lab2,
// Debian 13, libvirt 11.3, QEMU 10.0).
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A TCG guest as each version defines the provider's domains: its
// machine type is that QEMU's pc, its CPU the named qemu64.
func TestRealHostsJudgeEachOthersGuests(t *testing.T) {
	t.Parallel()
	hosts := map[string]*fakeSource{
		"9.0":  {caps: readTestdata(t, "caps-libvirt-9.0.xml"), domcaps: readTestdata(t, "domcaps-libvirt-9.0-qemu-pc-i440fx-7.2.xml")},
		"11.3": {caps: readTestdata(t, "caps-libvirt-11.3.xml"), domcaps: readTestdata(t, "domcaps-libvirt-11.3-qemu-pc-i440fx-7.2.xml")},
	}
	guest := func(machine string) Guest {
		return Guest{Arch: "x86_64", Machine: machine, CPUMode: "custom", CPUModel: "qemu64"}
	}
	for _, tc := range []struct {
		host    string
		g       Guest
		refused string
	}{
		{"9.0", guest("pc-i440fx-10.0"), "its QEMU does not support machine type pc-i440fx-10.0 (it offers …, pc-i440fx-7.0, pc-i440fx-7.1, pc-i440fx-7.2)"},
		{"9.0", guest("pc-q35-10.0"), "machine type pc-q35-10.0"},
		{"9.0", guest("pc-i440fx-7.2"), ""},
		{"11.3", guest("pc-i440fx-7.2"), ""},
		{"11.3", guest("pc-i440fx-10.0"), ""},
		{"9.0", guest("pc"), ""},
		{"9.0", Guest{Arch: "x86_64", Machine: "pc-i440fx-7.2", CPUMode: "host-passthrough"}, "does not support CPU mode host-passthrough"},
		{"11.3", Guest{Arch: "x86_64", Machine: "pc-i440fx-7.2", CPUMode: "custom", CPUModel: "no-such-cpu"}, "no CPU model no-such-cpu"},
	} {
		var c Cache
		v, err := c.Refuses(time.Unix(1, 0), hosts[tc.host], tc.g, "qemu")
		if err != nil || (tc.refused == "") != (v.Refused == "") || !strings.Contains(v.Refused, tc.refused) || v.Unchecked != "" {
			t.Errorf("libvirt %s, %s: %+v, %v; want refused %q", tc.host, tc.g, v, err, tc.refused)
		}
	}
	// Neither version offers kvm on the lab (TCG only): no machine types
	// are listed for it, so nothing is judged (the accelerator check of
	// the destination XML refuses a kvm guest there).
	if m := MachinesOf(parse(t, hosts["9.0"].caps), "x86_64", "kvm"); len(m.names) != 0 {
		t.Errorf("kvm machines on a TCG host: %d", len(m.names))
	}
}
