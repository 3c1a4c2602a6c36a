package guestfit

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// CPUs is what one host's QEMU offers a guest's CPU, for one machine
// type and domain type: the modes it supports and its named models with
// libvirt's usable verdict ("yes", "no", "unknown"). Known is false when
// the domain capabilities had no <cpu> section.
type CPUs struct {
	Known  bool
	Modes  map[string]bool
	Models map[string]string
	// Unchecked: the host did not answer (see Cache.cpusFor), and why.
	Unchecked string
}

// CPUsOf reads the CPU section of domain capabilities.
func CPUsOf(dc *libvirtxml.DomainCaps) CPUs {
	if dc.CPU == nil {
		return CPUs{}
	}
	c := CPUs{Known: true, Modes: map[string]bool{}, Models: map[string]string{}}
	for _, m := range dc.CPU.Modes {
		c.Modes[m.Name] = m.Supported == "yes"
		if m.Name == "custom" {
			for _, x := range m.Models {
				c.Models[x.Name] = x.Usable
			}
		}
	}
	return c
}

// refuses says why the host cannot give the guest its CPU ("" if it can).
// A migrated guest keeps its CPU: a custom model must exist on the host
// and not be reported unusable (the host's CPU, or TCG, lacks some of its
// features: QEMU would drop them under a running guest); a host-model or
// host-passthrough guest needs that mode.
func (c CPUs) refuses(g Guest) string {
	if g.CPUMode == "" || !c.Known {
		return ""
	}
	if supported, listed := c.Modes[g.CPUMode]; listed && !supported {
		return fmt.Sprintf("its QEMU does not support CPU mode %s", g.CPUMode)
	}
	if g.CPUMode != "custom" || g.CPUModel == "" {
		return ""
	}
	usable, ok := c.Models[g.CPUModel]
	switch {
	case !ok:
		return fmt.Sprintf("its QEMU has no CPU model %s for machine type %s", g.CPUModel, orNone(g.Machine))
	case usable == "no":
		return fmt.Sprintf("CPU model %s is not usable there (libvirt reports usable=no: the host lacks some of its features)", g.CPUModel)
	}
	return ""
}
