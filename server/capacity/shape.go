package capacity

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
)

// CPUSpec is an instance type's "cpu" object.
type CPUSpec struct {
	Model   string `json:"model,omitempty"`
	Sockets int    `json:"sockets,omitempty"`
	Cores   int    `json:"cores,omitempty"`
	Threads int    `json:"threads,omitempty"`
}

// NICSpec is one entry of an instance type's "network" list.
type NICSpec struct {
	Network string `json:"network,omitempty"`
	Bridge  string `json:"bridge,omitempty"`
	Model   string `json:"model,omitempty"`
}

// Bounds of the shape fields: far past any host, near enough to refuse a
// typo (a disk_gib in MiB, a hugepage size in bytes).
const (
	maxDiskGiB = 64 << 10
	maxNICs    = 16
)

// NICModels are the NIC device models a type may ask for: QEMU's common
// emulated NICs, which every x86 guest has a driver for.
var NICModels = []string{"virtio", "e1000", "e1000e", "rtl8139"}

var (
	// A libvirt CPU model name ("Haswell-noTSX", "EPYC-Rome", "qemu64").
	cpuModelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// A libvirt network name: no '/', nothing a shell or XML would read.
	networkRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// A Linux interface name: at most 15 bytes (IFNAMSIZ-1).
	bridgeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
)

// validateShape checks the shape fields of it on their own (what the host
// offers is the backend's check at startup); each message names the field.
func validateShape(it InstanceType) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if it.DiskGiB < 0 || it.DiskGiB > maxDiskGiB {
		bad("disk_gib %d must be > 0 (and at most %d); leave it out for the golden image's size", it.DiskGiB, maxDiskGiB)
	}
	switch it.Firmware {
	case "", backend.FirmwareBIOS, backend.FirmwareUEFI, backend.FirmwareUEFISecure:
	default:
		bad("firmware %q: want %s, %s or %s", it.Firmware, backend.FirmwareBIOS, backend.FirmwareUEFI, backend.FirmwareUEFISecure)
	}
	if it.CPU != nil {
		errs = append(errs, validateCPU(*it.CPU, it.VCPU))
	}
	if it.HugePages != "" {
		if _, err := ParseHugePageSize(it.HugePages); err != nil {
			bad("hugepages: %w", err)
		}
	}
	if len(it.Network) > maxNICs {
		bad("network: %d NICs, at most %d", len(it.Network), maxNICs)
	}
	for i, n := range it.Network {
		if err := validateNIC(n); err != nil {
			bad("network[%d]: %w", i, err)
		}
	}
	return errors.Join(errs...)
}

func validateCPU(c CPUSpec, vcpu int) error {
	switch {
	case c.Model == "", c.Model == backend.CPUHostPassthrough, c.Model == backend.CPUHostModel:
	case !cpuModelRE.MatchString(c.Model):
		return fmt.Errorf("cpu.model %q: want %s, %s or a CPU model name (letters, digits, '.', '_', '-')",
			c.Model, backend.CPUHostPassthrough, backend.CPUHostModel)
	}
	if c.Sockets == 0 && c.Cores == 0 && c.Threads == 0 {
		return nil
	}
	if c.Sockets <= 0 || c.Cores <= 0 || c.Threads <= 0 {
		return fmt.Errorf("cpu: sockets, cores and threads must all be > 0 when one is given (got %d/%d/%d)",
			c.Sockets, c.Cores, c.Threads)
	}
	if p := c.Sockets * c.Cores * c.Threads; p != vcpu {
		return fmt.Errorf("cpu: sockets×cores×threads = %d×%d×%d = %d, must equal vcpu %d",
			c.Sockets, c.Cores, c.Threads, p, vcpu)
	}
	return nil
}

func validateNIC(n NICSpec) error {
	switch {
	case n.Network == "" && n.Bridge == "":
		return errors.New("give network (a libvirt network) or bridge (a host bridge)")
	case n.Network != "" && n.Bridge != "":
		return fmt.Errorf("network %q and bridge %q: give one of them", n.Network, n.Bridge)
	case n.Network != "" && !networkRE.MatchString(n.Network):
		return fmt.Errorf("network %q: want letters, digits, '.', '_' or '-'", n.Network)
	case n.Bridge != "" && !bridgeRE.MatchString(n.Bridge):
		return fmt.Errorf("bridge %q: want an interface name of at most 15 letters, digits, '.', '_' or '-'", n.Bridge)
	}
	if n.Model != "" && !contains(NICModels, n.Model) {
		return fmt.Errorf("model %q: want one of %s", n.Model, strings.Join(NICModels, ", "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ParseHugePageSize reads a huge page size ("2M", "1G", "2048K", "2MiB")
// into KiB. The size must be a power of two of at least 64 KiB (every
// architecture's huge pages are; 4K is an ordinary page).
func ParseHugePageSize(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "iB"), "B")
	if t == "" {
		return 0, fmt.Errorf("%q: want a size such as 2M or 1G", s)
	}
	shift := map[byte]uint{'K': 0, 'k': 0, 'M': 10, 'm': 10, 'G': 20, 'g': 20}
	sh, ok := shift[t[len(t)-1]]
	if !ok {
		return 0, fmt.Errorf("%q: want a size with a unit K, M or G, such as 2M or 1G", s)
	}
	n, err := strconv.ParseUint(t[:len(t)-1], 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q: want a size such as 2M or 1G", s)
	}
	kib := n << sh
	if bits.OnesCount64(kib) != 1 || kib < 64 || kib > 16<<20 {
		return 0, fmt.Errorf("%q: a huge page size is a power of two between 64K and 16G", s)
	}
	return kib, nil
}

// Shape is the backend's view of the type's machine shape (validated).
func (it InstanceType) Shape() backend.Shape {
	s := backend.Shape{DiskGiB: it.DiskGiB, Firmware: it.Firmware, TPM: it.TPM}
	if it.CPU != nil {
		s.CPU = backend.CPUShape{Model: it.CPU.Model, Sockets: it.CPU.Sockets, Cores: it.CPU.Cores, Threads: it.CPU.Threads}
	}
	if it.HugePages != "" {
		s.HugePageKiB, _ = ParseHugePageSize(it.HugePages)
	}
	if it.Network != nil {
		s.NICs = make([]backend.NIC, 0, len(it.Network))
		for _, n := range it.Network {
			s.NICs = append(s.NICs, backend.NIC{Network: n.Network, Bridge: n.Bridge, Model: n.Model})
		}
	}
	return s
}

// LoadShapes reads the --instance-types file (path "" = built-ins only)
// and returns each type's shape and memory_mib by name, for the backend
// at startup. The file is validated exactly as Load does.
func LoadShapes(path string) (shapes map[string]backend.Shape, memoryMiB map[string]int, err error) {
	var data []byte
	if path != "" {
		if data, err = os.ReadFile(path); err != nil {
			return nil, nil, fmt.Errorf("--instance-types: %w", err)
		}
	}
	types, err := buildCatalog(data)
	if err != nil {
		return nil, nil, fmt.Errorf("--instance-types: %w", err)
	}
	shapes, memoryMiB = make(map[string]backend.Shape, len(types)), make(map[string]int, len(types))
	for name, it := range types {
		shapes[name], memoryMiB[name] = it.Shape(), it.MemoryMiB
	}
	return shapes, memoryMiB, nil
}
