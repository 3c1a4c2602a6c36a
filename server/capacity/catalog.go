package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// InstanceType is a VM shape: the hardware a slot's VM gets.
type InstanceType struct {
	Name      string `json:"name"`
	VCPU      int    `json:"vcpu"`
	MemoryMiB int    `json:"memory_mib"`
	// The machine shape (shape.go); every field optional.
	DiskGiB   int       `json:"disk_gib,omitempty"`
	Firmware  string    `json:"firmware,omitempty"`
	TPM       bool      `json:"tpm,omitempty"`
	CPU       *CPUSpec  `json:"cpu,omitempty"`
	HugePages string    `json:"hugepages,omitempty"`
	Network   []NICSpec `json:"network,omitempty"`
}

// Upper bounds keep junk from overflowing price or quantity arithmetic; they
// are far beyond any libvirt host.
const (
	maxVCPU      = 1 << 16
	maxMemoryMiB = 1 << 32
	maxNameLen   = 63
)

// BuiltinInstanceTypes returns the catalog used when no --instance-types file
// is given; a file replaces entries of the same name and adds new ones.
func BuiltinInstanceTypes() []InstanceType {
	return []InstanceType{
		{Name: "kvm.small", VCPU: 2, MemoryMiB: 4 * 1024},
		{Name: "kvm.medium", VCPU: 4, MemoryMiB: 8 * 1024},
		{Name: "kvm.large", VCPU: 8, MemoryMiB: 16 * 1024},
		{Name: "kvm.xlarge", VCPU: 16, MemoryMiB: 32 * 1024},
	}
}

// ParseInstanceTypes decodes and validates an --instance-types file: a JSON
// array of InstanceType. Unknown fields are rejected so a typo such as
// "memory" instead of "memory_mib" is not silently a zero.
func ParseInstanceTypes(data []byte) ([]InstanceType, error) {
	raws, err := splitArray("instance_types", data)
	if err != nil {
		return nil, err
	}
	out := make([]InstanceType, 0, len(raws))
	seen := make(map[string]int, len(raws))
	for i, raw := range raws {
		var it InstanceType
		if err := decodeStrict(raw, &it); err != nil {
			return nil, fmt.Errorf("instance_types[%d]: %w", i, err)
		}
		if err := validateInstanceType(it); err != nil {
			return nil, fmt.Errorf("instance_types[%d]: %w", i, err)
		}
		if j, dup := seen[it.Name]; dup {
			return nil, fmt.Errorf("instance_types[%d]: name %q duplicates instance_types[%d]", i, it.Name, j)
		}
		seen[it.Name] = i
		out = append(out, it)
	}
	return out, nil
}

func validateInstanceType(it InstanceType) error {
	if err := checkName("name", it.Name); err != nil {
		return err
	}
	if it.VCPU <= 0 || it.VCPU > maxVCPU {
		return fmt.Errorf("vcpu %d must be > 0 (and at most %d)", it.VCPU, maxVCPU)
	}
	if it.MemoryMiB <= 0 || it.MemoryMiB > maxMemoryMiB {
		return fmt.Errorf("memory_mib %d must be > 0 (and at most %d)", it.MemoryMiB, maxMemoryMiB)
	}
	if err := validateShape(it); err != nil {
		return fmt.Errorf("instance type %q: %w", it.Name, err)
	}
	return nil
}

// mergeInstanceTypes overlays extra on base by name.
func mergeInstanceTypes(base, extra []InstanceType) map[string]InstanceType {
	out := make(map[string]InstanceType, len(base)+len(extra))
	for _, it := range base {
		out[it.Name] = it
	}
	for _, it := range extra {
		out[it.Name] = it
	}
	return out
}

func sortedTypes(m map[string]InstanceType) []InstanceType {
	out := make([]InstanceType, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// checkName keeps names to characters that are safe inside machine ids and
// libvirt domain names, which are derived from them.
func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s must not be empty", field)
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%s %q is longer than %d characters", field, s, maxNameLen)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '-' || r == '_'
		if !ok {
			return fmt.Errorf("%s %q may only contain letters, digits, '.', '-' and '_'", field, s)
		}
	}
	return nil
}

// splitArray checks data is one JSON array and returns its raw elements, so
// each element can be decoded on its own and errors can name its index.
func splitArray(what string, data []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("%s: expected a JSON array", what)
	}
	var raws []json.RawMessage
	if err := decodeStrict(trimmed, &raws); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for i, r := range raws {
		if t := bytes.TrimSpace(r); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s[%d]: expected a JSON object", what, i)
		}
	}
	return raws, nil
}

// decodeStrict decodes exactly one JSON value with unknown fields rejected.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}
