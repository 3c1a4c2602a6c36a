package capacity

import (
	"fmt"
	"maps"

	"slices"
	"strings"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Capacity type spellings used in files and on the command line. libvirt
// has no spot market and no reservations, so only these two are offered.
const (
	OnDemand  = "on_demand"
	BareMetal = "bare_metal"
)

// MaxSlots caps the total number of slots, so a typo like count 1e9 fails at
// startup instead of exhausting memory while seeding.
const MaxSlots = 1_000_000

// Well-known Kubernetes labels added to every slot. They only mirror the
// top-level fields; they never replace them.
const (
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelZone         = "topology.kubernetes.io/zone"
)

// Offering is one entry of an --offerings file: Count slots of InstanceType
// in Zone. Resources, if set, is the per-replica request the offering
// serves; otherwise a default is derived (see DefaultResources).
type Offering struct {
	InstanceType string            `json:"instance_type"`
	Zone         string            `json:"zone"`
	CapacityType string            `json:"capacity_type"`
	Count        int               `json:"count"`
	Resources    map[string]string `json:"resources,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// ParseCapacityType maps "on_demand" / "bare_metal" to the engine's enum.
// The empty string means on_demand, the default of --capacity-type.
func ParseCapacityType(s string) (record.CapacityType, error) {
	switch s {
	case OnDemand, "":
		return record.CapacityOnDemand, nil
	case BareMetal:
		return record.CapacityBareMetal, nil
	}
	return record.CapacityUnspecified,
		fmt.Errorf("capacity_type %q is not offered by libvirt (%s or %s)", s, OnDemand, BareMetal)
}

// DecodeOfferings decodes an --offerings file: a JSON array of Offering
// with unknown fields rejected. It checks syntax and shape only; Load
// validates the entries against the catalog and the served zones.
func DecodeOfferings(data []byte) ([]Offering, error) {
	raws, err := splitArray("offerings", data)
	if err != nil {
		return nil, err
	}
	out := make([]Offering, len(raws))
	for i, raw := range raws {
		if err := decodeStrict(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("offerings[%d]: %w", i, err)
		}
	}
	return out, nil
}

// validateOffering checks one entry; zones nil means "any zone".
func validateOffering(o Offering, types map[string]InstanceType, zones []string) error {
	if o.InstanceType == "" {
		return fmt.Errorf("instance_type must not be empty")
	}
	if _, ok := types[o.InstanceType]; !ok {
		return fmt.Errorf("unknown instance_type %q", o.InstanceType)
	}
	if err := checkName("zone", o.Zone); err != nil {
		return err
	}
	if len(zones) > 0 && !slices.Contains(zones, o.Zone) {
		return fmt.Errorf("zone %q is not served by this provider (serves %s)", o.Zone, strings.Join(zones, ", "))
	}
	if _, err := ParseCapacityType(o.CapacityType); err != nil {
		return err
	}
	if o.Count < 0 || o.Count > MaxSlots {
		return fmt.Errorf("count %d must be >= 0 (and at most %d)", o.Count, MaxSlots)
	}
	if err := validateResources(o.Resources); err != nil {
		return err
	}
	return validateLabels(o)
}

func validateResources(r map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(r)) {
		if k == "" {
			return fmt.Errorf("resources: empty resource name")
		}
		if strings.TrimSpace(r[k]) == "" {
			return fmt.Errorf("resources[%q]: empty quantity", k)
		}
	}
	return nil
}

// validateLabels refuses labels that would contradict the top-level fields:
// a consumer reading either must see the same answer.
func validateLabels(o Offering) error {
	want := map[string]string{LabelInstanceType: o.InstanceType, LabelZone: o.Zone}
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		if k == "" {
			return fmt.Errorf("labels: empty label key")
		}
		if w, ok := want[k]; ok && o.Labels[k] != w {
			return fmt.Errorf("labels[%q] = %q contradicts the offering's %q", k, o.Labels[k], w)
		}
	}
	return nil
}

// offeringKey identifies an offering; two entries with one key are refused
// because their slots would share ids.
type offeringKey struct{ instanceType, zone, capacityType string }

func keyOf(o Offering) offeringKey {
	ct := o.CapacityType
	if ct == "" {
		ct = OnDemand
	}
	return offeringKey{o.InstanceType, o.Zone, ct}
}

// validateOfferings checks every entry, duplicates and id collisions.
func validateOfferings(offs []Offering, types map[string]InstanceType, zones []string) error {
	seen := make(map[offeringKey]int, len(offs))
	prefixes := make(map[string]int, len(offs))
	total := 0
	for i, o := range offs {
		if err := validateOffering(o, types, zones); err != nil {
			return fmt.Errorf("offerings[%d]: %w", i, err)
		}
		k := keyOf(o)
		if j, dup := seen[k]; dup {
			return fmt.Errorf("offerings[%d]: duplicates offerings[%d] (instance_type %q, zone %q, capacity_type %q)",
				i, j, k.instanceType, k.zone, k.capacityType)
		}
		seen[k] = i
		ct, _ := ParseCapacityType(o.CapacityType)
		p := idPrefix(o.Zone, o.InstanceType, ct)
		if j, dup := prefixes[p]; dup {
			return fmt.Errorf("offerings[%d]: machine ids %q-NNNN would collide with offerings[%d]", i, p, j)
		}
		prefixes[p] = i
		if total += o.Count; total > MaxSlots {
			return fmt.Errorf("offerings[%d]: total count exceeds %d slots", i, MaxSlots)
		}
	}
	return nil
}

// DefaultOfferings spreads n slots of kvm.small over zones as evenly as
// possible, earlier zones taking the remainder. It is what runs when no
// --offerings file is given.
func DefaultOfferings(n int, zones []string, capacityType string) []Offering {
	out := make([]Offering, 0, len(zones))
	for i, z := range zones {
		c := n / len(zones)
		if i < n%len(zones) {
			c++
		}
		out = append(out, Offering{InstanceType: DefaultInstanceType, Zone: z, CapacityType: capacityType, Count: c})
	}
	return out
}

// DefaultInstanceType is the type of the default offerings.
const DefaultInstanceType = "kvm.small"
