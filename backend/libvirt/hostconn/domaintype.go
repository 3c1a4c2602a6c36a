package hostconn

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// Values of --domain-type.
const (
	// DomainTypeAuto: kvm where QEMU can actually open /dev/kvm, else
	// qemu (TCG). Never settles on an accelerator whose start fails.
	DomainTypeAuto = "auto"
	// DomainTypeKVM: hardware acceleration or nothing: a host where QEMU
	// cannot use KVM is refused at connect.
	DomainTypeKVM = "kvm"
	// DomainTypeQEMU: software emulation (TCG), whatever the host offers.
	DomainTypeQEMU = "qemu"
)

// ValidDomainType checks a --domain-type value ("" means auto).
func ValidDomainType(s string) error {
	switch s {
	case "", DomainTypeAuto, DomainTypeKVM, DomainTypeQEMU:
		return nil
	}
	return fmt.Errorf("--domain-type %q: want %s, %s or %s", s, DomainTypeAuto, DomainTypeKVM, DomainTypeQEMU)
}

// TypeChoice is what a host settled on at connect: the domain type and,
// when auto fell back to qemu, why.
type TypeChoice struct {
	Type     string
	Fallback string // non-empty: kvm was offered but cannot be used
}

// offeredTypes lists the domain types the host's capabilities offer for
// x86_64 hvm guests; when there are none, those of any hvm guest (the test
// driver offers only "test" for i686).
func offeredTypes(caps *libvirtxml.Caps) []string {
	offered := func(arch string) []string {
		var types []string
		for _, g := range caps.Guests {
			if g.OSType == "hvm" && (arch == "" || g.Arch.Name == arch) {
				for _, d := range g.Arch.Domains {
					types = append(types, d.Type)
				}
			}
		}
		return types
	}
	if types := offered("x86_64"); len(types) > 0 {
		return types
	}
	return offered("")
}

// decideDomainType applies --domain-type to what the host offers. probeKVM
// starts a throwaway paused kvm guest and returns why it could not; it is
// only called when kvm is offered and wanted. An error refuses the host:
// its message names the flag and the cause.
func decideDomainType(mode string, offered []string, probeKVM func() error) (TypeChoice, error) {
	has := func(t string) bool { return slices.Contains(offered, t) }
	shown := strings.Join(offered, ", ")
	if shown == "" {
		shown = "none"
	}
	switch mode {
	case DomainTypeQEMU:
		if !has(DomainTypeQEMU) {
			return TypeChoice{}, fmt.Errorf("--domain-type=qemu: the host offers no qemu (TCG) domain type for hvm guests (offers: %s)", shown)
		}
		return TypeChoice{Type: DomainTypeQEMU}, nil
	case DomainTypeKVM:
		if !has(DomainTypeKVM) {
			return TypeChoice{}, fmt.Errorf("--domain-type=kvm: the host does not offer kvm (offers: %s); is /dev/kvm present and the kvm module loaded?", shown)
		}
		if err := probeKVM(); err != nil {
			return TypeChoice{}, fmt.Errorf("--domain-type=kvm: QEMU cannot use KVM on this host: %w", err)
		}
		return TypeChoice{Type: DomainTypeKVM}, nil
	}
	if has(DomainTypeKVM) {
		err := probeKVM()
		if err == nil {
			return TypeChoice{Type: DomainTypeKVM}, nil
		}
		if has(DomainTypeQEMU) && IsKVMUnusable(err) {
			return TypeChoice{Type: DomainTypeQEMU, Fallback: message(err)}, nil
		}
		// The probe failed for a reason that is not KVM's (an ACL, a
		// missing emulator): falling back would hide it, so keep kvm and
		// let the Create say what is wrong.
		return TypeChoice{Type: DomainTypeKVM}, nil
	}
	if has(DomainTypeQEMU) {
		return TypeChoice{Type: DomainTypeQEMU}, nil
	}
	if len(offered) == 0 {
		return TypeChoice{}, errors.New("the host's capabilities offer no hvm domain type")
	}
	return TypeChoice{Type: offered[0]}, nil
}

// IsKVMUnusable recognises QEMU failing to open or initialise KVM
// ("Could not access KVM kernel module: Permission denied", "failed to
// initialize kvm", libvirt's "does not support virt type 'kvm'").
func IsKVMUnusable(err error) bool {
	if err == nil {
		return false
	}
	m := strings.ToLower(message(err))
	return strings.Contains(m, "kvm kernel module") || strings.Contains(m, "initialize kvm") ||
		strings.Contains(m, "virt type 'kvm'") || strings.Contains(m, "/dev/kvm")
}

// chooseType reads the capabilities and applies --domain-type.
func (h *Host) chooseType(conn virt.Conn) (TypeChoice, error) {
	caps, err := readCaps(conn)
	if err != nil {
		return TypeChoice{}, err
	}
	return decideDomainType(h.cfg.DomainType, offeredTypes(caps), func() error {
		return probeKVM(conn, h.cfg.ProbeName)
	})
}

// FallBackToQEMU switches an auto host to qemu (TCG) after a start failed
// because QEMU could not use KVM; it reports whether it switched (false
// when the type was chosen explicitly or is already qemu).
func (h *Host) FallBackToQEMU(reason string) bool {
	h.mu.Lock()
	if h.cfg.DomainType == DomainTypeKVM || h.cfg.DomainType == DomainTypeQEMU || h.choice.Type != DomainTypeKVM {
		h.mu.Unlock()
		return false
	}
	h.choice = TypeChoice{Type: DomainTypeQEMU, Fallback: reason}
	h.mu.Unlock()
	h.log.Warn("a kvm guest could not start; this host now runs guests in qemu (TCG)", "reason", reason)
	return true
}

// readCaps reads and parses the host's capabilities.
func readCaps(conn virt.Conn) (*libvirtxml.Caps, error) {
	s, err := conn.GetCapabilities()
	if err != nil {
		return nil, fmt.Errorf("read host capabilities: %w", err)
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(s); err != nil {
		return nil, fmt.Errorf("parse host capabilities: %w", err)
	}
	return &caps, nil
}

// probeKVM starts a transient, paused, diskless kvm guest and destroys it
// at once. QEMU opens /dev/kvm while it starts, before any vCPU runs, so
// this tells "kvm listed" from "kvm usable by the QEMU user" in about a
// second without booting anything. (A KVM that opens but cannot run a
// guest, as under nested virtualisation without vmx, needs a real boot to
// tell; see docs/troubleshooting.md.) The name is the owner's
// (Config.ProbeName: the bf- prefix the polkit rule allows) and the domain
// has no metadata, so Inventory never counts it.
func probeKVM(conn virt.Conn, name string) error {
	x, err := (&libvirtxml.Domain{
		Type:   DomainTypeKVM,
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: 16, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}},
	}).Marshal()
	if err != nil {
		return err
	}
	dom, err := conn.DomainCreateXML(x, libvirt.DOMAIN_START_PAUSED|libvirt.DOMAIN_START_AUTODESTROY)
	if err != nil {
		return errors.New(message(err))
	}
	defer dom.Free()
	if err := dom.Destroy(); err != nil && !isNoDomain(err) && !isNotRunning(err) {
		return fmt.Errorf("destroy kvm probe: %w", err)
	}
	return nil
}

// ForceDomainType makes guests be defined with type t, as if the host had
// chosen it at connect, until the next connect chooses again. For tests:
// a type the host cannot run makes a define fail at a chosen step.
func (h *Host) ForceDomainType(t string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.choice = TypeChoice{Type: t}
}
