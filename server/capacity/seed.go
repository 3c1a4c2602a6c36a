package capacity

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Model is a validated capacity model. It is immutable and safe for
// concurrent use.
type Model struct {
	types     map[string]InstanceType
	offerings []resolved
}

// resolved is an offering with everything its slots share worked out once,
// so seeding 100k slots is a loop of map clones.
type resolved struct {
	Offering
	capacity    record.CapacityType
	it          InstanceType
	price       float64
	prefix      string
	resources   map[string]string
	allocatable map[string]string
	labels      map[string]string
}

func newModel(cfg Config, types map[string]InstanceType, offs []Offering) *Model {
	m := &Model{types: types, offerings: make([]resolved, 0, len(offs))}
	for _, o := range offs {
		ct, _ := ParseCapacityType(o.CapacityType) // validated by Build
		if o.CapacityType == "" {
			o.CapacityType = OnDemand
		}
		it := types[o.InstanceType]
		r := resolved{Offering: o, capacity: ct, it: it,
			prefix:      idPrefix(o.Zone, o.InstanceType, ct),
			allocatable: Allocatable(it),
			resources:   maps.Clone(o.Resources),
			labels:      maps.Clone(o.Labels),
		}
		if ct != record.CapacityBareMetal { // bare metal is owned: price 0
			r.price = hourlyPrice(it, cfg.Prices, cfg.PricePerVCPUHour, cfg.PricePerGiBHour)
		}
		if len(r.resources) == 0 {
			r.resources = DefaultResources(it)
		}
		if r.labels == nil {
			r.labels = make(map[string]string, 2)
		}
		r.labels[LabelInstanceType] = o.InstanceType
		r.labels[LabelZone] = o.Zone
		m.offerings = append(m.offerings, r)
	}
	return m
}

// InstanceTypes returns the catalog (built-ins merged with the file),
// sorted by name.
func (m *Model) InstanceTypes() []InstanceType { return sortedTypes(m.types) }

// InstanceType looks a type up by name.
func (m *Model) InstanceType(name string) (InstanceType, bool) {
	it, ok := m.types[name]
	return it, ok
}

// Offerings returns the validated offerings, capacity type spelled out.
func (m *Model) Offerings() []Offering {
	out := make([]Offering, len(m.offerings))
	for i, r := range m.offerings {
		out[i] = r.Offering
		out[i].Resources = maps.Clone(r.Resources)
		out[i].Labels = maps.Clone(r.Labels)
	}
	return out
}

// Size is the total number of slots Seed returns.
func (m *Model) Size() int {
	n := 0
	for _, r := range m.offerings {
		n += r.Count
	}
	return n
}

// Seed returns one SPECULATIVE record per slot, in offering order then
// index order. Every record owns its maps. The engine adds the ids it does
// not know yet and leaves known ones alone, which is why ids are stable.
func (m *Model) Seed() []record.Machine {
	out := make([]record.Machine, 0, m.Size())
	for _, r := range m.offerings {
		for i := range r.Count {
			out = append(out, r.machine(i))
		}
	}
	return out
}

func (r *resolved) machine(i int) record.Machine {
	return record.Machine{
		ID:           r.prefix + "-" + index(i),
		State:        record.Speculative,
		InstanceType: r.InstanceType,
		Zone:         r.Zone,
		CapacityType: r.capacity,
		PricePerHour: r.price,
		Resources:    maps.Clone(r.resources),
		Allocatable:  maps.Clone(r.allocatable),
		Labels:       maps.Clone(r.labels),
		VCPU:         r.it.VCPU,
		MemoryMiB:    r.it.MemoryMiB,
	}
}

// MachineID is the id of slot i of an offering:
// "<zone>-<type, dots as dashes>-<index, 4+ digits>", with "-bm" after the
// zone for bare metal, e.g. "zone-a-kvm-small-0007", "zone-a-bm-kvm-large-0000".
// Build refuses offerings whose prefixes collide; since the index is
// all digits after the last dash, distinct prefixes give distinct ids.
func MachineID(zone, instanceType string, ct record.CapacityType, i int) string {
	return idPrefix(zone, instanceType, ct) + "-" + index(i)
}

func idPrefix(zone, instanceType string, ct record.CapacityType) string {
	t := strings.ReplaceAll(instanceType, ".", "-")
	if ct == record.CapacityBareMetal {
		return zone + "-bm-" + t
	}
	return zone + "-" + t
}

func index(i int) string { return fmt.Sprintf("%04d", i) }

// Allocatable is the type's hardware as Kubernetes quantities, e.g.
// {"cpu": "2", "memory": "4Gi"}.
func Allocatable(it InstanceType) map[string]string {
	return map[string]string{"cpu": strconv.Itoa(it.VCPU), "memory": mib(it.MemoryMiB)}
}

// DefaultResources is the per-replica request an offering serves when its
// entry gives none: what is left for a workload once the node's own
// overhead is reserved — 90% of the vCPUs in millicores, and memory minus
// 512Mi (or half the memory on types of 1Gi or less). It is therefore
// always strictly below Allocatable, as the contract requires them to be
// different things.
func DefaultResources(it InstanceType) map[string]string {
	mem := it.MemoryMiB - 512
	if it.MemoryMiB <= 1024 {
		mem = it.MemoryMiB / 2
	}
	return map[string]string{
		"cpu":    strconv.Itoa(it.VCPU*900) + "m",
		"memory": mib(mem),
	}
}

// mib renders MiB as a quantity, in Gi when it divides evenly.
func mib(n int) string {
	if n%1024 == 0 && n != 0 {
		return strconv.Itoa(n/1024) + "Gi"
	}
	return strconv.Itoa(n) + "Mi"
}
