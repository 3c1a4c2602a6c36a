// Package shapecheck checks what a host offers against the instance types'
// shapes: the firmware files, TPM emulation, huge pages, CPU model,
// networks and the golden image's size (Probe reads them from one host's
// connection, Check names every shape the host cannot give). It needs no
// Backend.
package shapecheck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// HugePageSizes lists the huge page sizes the instance types use.
func HugePageSizes(shapes map[string]backend.Shape) []uint64 {
	var out []uint64
	for _, s := range shapes {
		if s.HugePageKiB != 0 && !slices.Contains(out, s.HugePageKiB) {
			out = append(out, s.HugePageKiB)
		}
	}
	slices.Sort(out)
	return out
}

// Offers is what one host offers the shapes: read by Probe.
type Offers struct {
	// Loaders are the firmware files QEMU can load for UEFI domains of
	// the host's type (domain capabilities of a q35 machine).
	Loaders []string
	// TPMEmulator: the host can emulate a TPM 2.0 (swtpm); TPMKnown says
	// the domain capabilities answered the question at all.
	TPMEmulator, TPMKnown bool
	// HugePages by size (KiB), for the sizes the types use.
	HugePages map[uint64]hostconn.HugePages
	// Networks are the active libvirt networks.
	Networks []string
	// DomainType is the type the host's domains get (kvm, qemu).
	DomainType string
	// CPUModes are the CPU modes the host's QEMU supports, CPUModels its
	// named models with libvirt's usable verdict ("yes", "no", "unknown");
	// both nil when not read.
	CPUModes  map[string]bool
	CPUModels map[string]string
	// GoldenBytes is the golden image's virtual size (0: not read).
	GoldenBytes uint64
}

// needs says which probes the shapes call for.
type needs struct{ uefi, tpm, networks, cpu bool }

func needsOf(shapes map[string]backend.Shape) needs {
	var n needs
	for _, s := range shapes {
		n.uefi = n.uefi || s.UEFI()
		n.tpm = n.tpm || s.TPM
		n.cpu = n.cpu || s.CPU.Model != ""
		n.networks = n.networks || slices.ContainsFunc(s.NICs, func(c backend.NIC) bool { return c.Network != "" })
	}
	return n
}

// Probe reads what the host offers for the shapes given: domainType is
// the type the host's domains get, pool and image the --storage-pool and
// --image whose golden image a disk_gib is checked against.
func Probe(conn virt.Conn, domainType, pool, image string, shapes map[string]backend.Shape) (Offers, error) {
	o := Offers{DomainType: domainType}
	n := needsOf(shapes)
	if n.uefi || n.tpm || n.cpu {
		x, err := conn.GetDomainCapabilities("", "x86_64", domxml.UEFIMachine, domainType, 0)
		if err != nil {
			return o, fmt.Errorf("domain capabilities: %w", err)
		}
		var dc libvirtxml.DomainCaps
		if err := dc.Unmarshal(x); err != nil {
			return o, fmt.Errorf("domain capabilities: %w", err)
		}
		o.Loaders, o.TPMEmulator, o.TPMKnown = offersOf(&dc)
		o.CPUModes, o.CPUModels = cpuOffersOf(&dc)
	}
	if sizes := HugePageSizes(shapes); len(sizes) > 0 {
		hp, err := hostconn.HugePageSizes(conn, sizes)
		if err != nil {
			return o, fmt.Errorf("capabilities: %w", err)
		}
		o.HugePages = hp
	}
	if n.networks {
		nets, err := conn.ListNetworks()
		if err != nil {
			return o, fmt.Errorf("list networks: %w", err)
		}
		o.Networks = nets
	}
	if slices.ContainsFunc(slices.Collect(maps.Values(shapes)), func(s backend.Shape) bool { return s.DiskGiB > 0 }) {
		p, err := conn.LookupStoragePoolByName(pool)
		if err != nil {
			return o, fmt.Errorf("--storage-pool %s: %w", pool, err)
		}
		defer p.Free()
		g, err := volume.ReadGolden(p, image)
		if err != nil {
			return o, fmt.Errorf("--image: %w", err)
		}
		o.GoldenBytes = g.Capacity
	}
	return o, nil
}

// offersOf reads the firmware and TPM a host's domain capabilities list.
func offersOf(dc *libvirtxml.DomainCaps) (loaders []string, tpmEmulator, tpmKnown bool) {
	if dc.OS != nil && dc.OS.Loader != nil && dc.OS.Loader.Supported == "yes" {
		loaders = dc.OS.Loader.Values
	}
	if dc.Devices != nil && dc.Devices.TPM != nil {
		t := dc.Devices.TPM
		tpmKnown = true
		tpmEmulator = t.Supported == "yes"
		for _, e := range t.Enums {
			switch e.Name {
			case "backendModel":
				tpmEmulator = tpmEmulator && slices.Contains(e.Values, "emulator")
			case "backendVersion":
				tpmEmulator = tpmEmulator && (len(e.Values) == 0 || slices.Contains(e.Values, "2.0"))
			}
		}
	}
	return loaders, tpmEmulator, tpmKnown
}

// cpuOffersOf reads the CPU modes and named models of domain capabilities.
func cpuOffersOf(dc *libvirtxml.DomainCaps) (modes map[string]bool, models map[string]string) {
	if dc.CPU == nil {
		return nil, nil
	}
	modes, models = map[string]bool{}, map[string]string{}
	for _, m := range dc.CPU.Modes {
		modes[m.Name] = m.Supported == "yes"
		if m.Name == "custom" {
			for _, x := range m.Models {
				models[x.Name] = x.Usable
			}
		}
	}
	return modes, models
}

// checkCPU reports a CPU model the host cannot give.
func (o Offers) checkCPU(c backend.CPUShape) string {
	switch m := c.Model; {
	case m == "":
		return ""
	case m == backend.CPUHostPassthrough && o.DomainType != hostconn.DomainTypeKVM:
		return fmt.Sprintf("cpu.model %s needs KVM, and the host runs %s domains (leave cpu.model out for the hypervisor's default under TCG)", m, o.DomainType)
	case m == backend.CPUHostPassthrough || m == backend.CPUHostModel:
		if o.CPUModes != nil && !o.CPUModes[m] {
			return fmt.Sprintf("cpu.model %s: the host's QEMU does not support that mode", m)
		}
	case o.CPUModels == nil:
	default:
		usable, ok := o.CPUModels[m]
		switch {
		case !ok:
			return fmt.Sprintf("cpu.model %q: the host's QEMU has no such CPU model (virsh domcapabilities lists them)", m)
		case usable == "no":
			return fmt.Sprintf("cpu.model %q: not usable on this host (libvirt reports usable=no: the host CPU lacks some of its features)", m)
		}
	}
	return ""
}

// Check reports every shape the host cannot give, each naming the
// instance type and the field. memory is each type's memory_mib (for the
// huge page total); netFlag is --network, which the types without a
// network list use.
func Check(hostName string, shapes map[string]backend.Shape, memory map[string]int, netFlag string, o Offers) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		s := shapes[name]
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("--instance-types: instance type %q: %s (host %s)", name, fmt.Sprintf(format, args...), hostName))
		}
		if code, _ := domxml.FirmwareFiles(s.Firmware); code != "" && !slices.Contains(o.Loaders, code) {
			bad("firmware %s: the host's QEMU offers no %s (install Debian's ovmf package; it offers %s)",
				s.Firmware, code, listOrNone(o.Loaders))
		}
		if why := o.checkCPU(s.CPU); why != "" {
			bad("%s", why)
		}
		if s.TPM && o.TPMKnown && !o.TPMEmulator {
			bad("tpm: the host cannot emulate a TPM 2.0 (install swtpm and swtpm-tools)")
		}
		if s.HugePageKiB != 0 {
			hp := o.HugePages[s.HugePageKiB]
			switch {
			case !hp.Supported:
				bad("hugepages: the host's CPU has no %s pages", pageName(s.HugePageKiB))
			case hp.TotalKiB == 0:
				bad("hugepages: the host has no %s pages reserved (vm.nr_hugepages, or the kernel's hugepagesz= and hugepages= parameters)",
					pageName(s.HugePageKiB))
			case hp.TotalKiB < uint64(max(memory[name], 0))<<10:
				bad("hugepages: the host has %d MiB of %s pages reserved, less than one machine's memory_mib %d (vm.nr_hugepages or the kernel's hugepages= parameter)",
					hp.TotalKiB>>10, pageName(s.HugePageKiB), memory[name])
			}
		}
		for i, n := range s.NICs {
			if n.Network != "" && !slices.Contains(o.Networks, n.Network) {
				bad("network[%d]: no active libvirt network %q (active: %s)", i, n.Network, listOrNone(o.Networks))
			}
		}
		if s.DiskGiB > 0 && o.GoldenBytes > 0 && uint64(s.DiskGiB)<<30 < o.GoldenBytes {
			bad("disk_gib %d is smaller than the golden image's virtual size (%s)", s.DiskGiB, gib(o.GoldenBytes))
		}
	}
	// The types without a network list use --network: checked once, when
	// the networks were listed for the others anyway.
	plain := slices.ContainsFunc(slices.Collect(maps.Values(shapes)), func(s backend.Shape) bool { return s.NICs == nil })
	if plain && netFlag != "" && o.Networks != nil && !slices.Contains(o.Networks, netFlag) {
		errs = append(errs, fmt.Errorf("--network: no active libvirt network %q, which the instance types without a network list use (host %s)", netFlag, hostName))
	}
	return errors.Join(errs...)
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func pageName(kib uint64) string {
	switch {
	case kib >= 1<<20 && kib%(1<<20) == 0:
		return fmt.Sprintf("%dG", kib>>20)
	case kib >= 1<<10 && kib%(1<<10) == 0:
		return fmt.Sprintf("%dM", kib>>10)
	}
	return fmt.Sprintf("%dK", kib)
}

func gib(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// Sized gives the overlay the shape's disk size: never smaller than
// the golden image's virtual size, which the guest's partition table and
// file systems were made for.
func Sized(g volume.Golden, typeName string, s backend.Shape) (volume.Golden, error) {
	if s.DiskGiB <= 0 {
		return g, nil
	}
	want := uint64(s.DiskGiB) << 30
	if want < g.Capacity {
		return g, fmt.Errorf("instance type %q: disk_gib %d is smaller than the golden image's virtual size (%s)",
			typeName, s.DiskGiB, gib(g.Capacity))
	}
	g.Capacity = want
	return g, nil
}

// NeedsProbe: a shape with anything a host may lack.
func NeedsProbe(s backend.Shape) bool {
	return s.UEFI() || s.TPM || s.HugePageKiB != 0 || len(s.NICs) > 0 || s.DiskGiB > 0 || s.CPU.Model != ""
}
