package guestfit

import (
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// Guest is what a destination must offer a running domain.
type Guest struct {
	Arch    string // x86_64; "" when the definition names none
	Machine string // the machine type as defined (canonical after a define); "" when none
	// CPUMode is the CPU's mode (custom, host-model, host-passthrough,
	// maximum), CPUModel the named model of a custom CPU; "" when the
	// definition has no <cpu> (the hypervisor's default).
	CPUMode, CPUModel string
}

// Of reads the guest's needs from its definition.
func Of(d *libvirtxml.Domain) Guest {
	var g Guest
	if d.OS != nil && d.OS.Type != nil {
		g.Arch, g.Machine = d.OS.Type.Arch, d.OS.Type.Machine
	}
	if d.CPU != nil {
		g.CPUMode = d.CPU.Mode
		if g.CPUMode == "" && d.CPU.Model != nil && d.CPU.Model.Value != "" {
			g.CPUMode = "custom" // libvirt's default mode when a model is named
		}
		if g.CPUMode == "custom" && d.CPU.Model != nil {
			g.CPUModel = d.CPU.Model.Value
		}
	}
	return g
}

// String names the guest's needs for a log line.
func (g Guest) String() string {
	s := "machine " + orNone(g.Machine)
	if g.CPUMode != "" {
		s += ", cpu " + g.CPUMode
		if g.CPUModel != "" {
			s += " " + g.CPUModel
		}
	}
	return s
}

// Machines is what one host's QEMU offers a domain type and architecture:
// each machine type name and alias it accepts. Empty: the capabilities
// list none (libvirt's test driver), so nothing can be judged.
type Machines struct {
	names     map[string]bool
	canonical []string // the versioned names, for a refusal's message
}

// MachinesOf reads the machine types of caps for hvm guests of arch ("":
// any) under domain type virtType. A domain type may list its own
// machines (kvm can differ from qemu); without them, the architecture's
// list applies.
func MachinesOf(caps *libvirtxml.Caps, arch, virtType string) Machines {
	m := Machines{names: map[string]bool{}}
	for _, g := range caps.Guests {
		if g.OSType != "hvm" || (arch != "" && g.Arch.Name != arch) {
			continue
		}
		for _, d := range g.Arch.Domains {
			if d.Type != virtType {
				continue
			}
			list := d.Machines
			if len(list) == 0 {
				list = g.Arch.Machines
			}
			for _, x := range list {
				m.add(x)
			}
		}
	}
	return m
}

func (m *Machines) add(x libvirtxml.CapsGuestMachine) {
	m.names[x.Name] = true
	if x.Canonical == "" && !slices.Contains(m.canonical, x.Name) {
		m.canonical = append(m.canonical, x.Name)
	}
}

// refuses says why the host cannot run machine type name ("" if it can).
// An alias counts as offered when the host has it (pc is whatever that
// host's pc means, which is what a definition naming pc asked for).
func (m Machines) refuses(name string) string {
	if name == "" || len(m.names) == 0 || m.names[name] {
		return ""
	}
	return fmt.Sprintf("its QEMU does not support machine type %s (it offers %s)", name, family(m.canonical, name))
}

// family lists the offered machine types of name's family (pc-i440fx-…
// for pc-i440fx-10.0), newest last, so a refusal shows what the host's
// QEMU goes up to without listing a hundred types.
func family(offered []string, name string) string {
	prefix := name
	if i := strings.LastIndex(name, "-"); i > 0 {
		prefix = name[:i+1]
	}
	var same []string
	for _, o := range offered {
		if strings.HasPrefix(o, prefix) {
			same = append(same, o)
		}
	}
	if len(same) == 0 {
		return fmt.Sprintf("%d other machine types, none of the %s family", len(offered), strings.TrimSuffix(prefix, "-"))
	}
	slices.SortFunc(same, compareVersions)
	if len(same) > 3 {
		same = append([]string{"…"}, same[len(same)-3:]...)
	}
	return strings.Join(same, ", ")
}

// compareVersions orders machine type names by their numeric parts
// (pc-i440fx-9.2 before pc-i440fx-10.0).
func compareVersions(a, b string) int {
	pa, pb := strings.FieldsFunc(a, sep), strings.FieldsFunc(b, sep)
	for i := 0; i < min(len(pa), len(pb)); i++ {
		na, ea := atoi(pa[i])
		nb, eb := atoi(pb[i])
		if ea && eb && na != nb {
			return na - nb
		}
		if c := strings.Compare(pa[i], pb[i]); !(ea && eb) && c != 0 {
			return c
		}
	}
	return len(pa) - len(pb)
}

func sep(r rune) bool { return r == '-' || r == '.' }

func atoi(s string) (int, bool) {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
		n = n*10 + int(r-'0')
	}
	return n, s != ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
