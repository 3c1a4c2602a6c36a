package capacity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func mustBuild(t *testing.T, mut func(*Config), typesJSON, offeringsJSON string) *Model {
	t.Helper()
	m, err := build(t, mut, typesJSON, offeringsJSON)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDefaultSeed(t *testing.T) {
	t.Parallel()
	ms := mustBuild(t, nil, "", "").Seed()
	if len(ms) != 32 {
		t.Fatalf("got %d slots, want 32", len(ms))
	}
	perZone := map[string]int{}
	for _, m := range ms {
		perZone[m.Zone]++
	}
	if perZone["zone-a"] != 16 || perZone["zone-b"] != 16 {
		t.Fatalf("split %v", perZone)
	}
	m := ms[0]
	want := record.Machine{ID: "zone-a-kvm-small-0000", State: record.Speculative, InstanceType: "kvm.small",
		Zone: "zone-a", CapacityType: record.CapacityOnDemand, VCPU: 2, MemoryMiB: 4096}
	if m.ID != want.ID || m.State != want.State || m.InstanceType != want.InstanceType || m.Zone != want.Zone ||
		m.CapacityType != want.CapacityType || m.VCPU != 2 || m.MemoryMiB != 4096 {
		t.Fatalf("got %+v", m)
	}
	if got := fmt.Sprint(m.Allocatable); got != "map[cpu:2 memory:4Gi]" {
		t.Fatalf("allocatable %s", got)
	}
	if got := fmt.Sprint(m.Resources); got != "map[cpu:1800m memory:3584Mi]" {
		t.Fatalf("resources %s", got)
	}
	if m.Labels[LabelZone] != "zone-a" || m.Labels[LabelInstanceType] != "kvm.small" {
		t.Fatalf("labels %v", m.Labels)
	}
	if p := 0.0030*2 + 0.0008*4; !approx(m.PricePerHour, p) || m.InterruptionProbability != 0 {
		t.Fatalf("price %v, want %v", m.PricePerHour, p)
	}
}

func approx(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

func TestSeedSplitOddAndOneZone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		zones []string
		n     int
		want  string
	}{
		{[]string{"zone-a", "zone-b"}, 5, "map[zone-a:3 zone-b:2]"},
		{[]string{"only"}, 7, "map[only:7]"},
		{[]string{"a", "b", "a"}, 4, "map[a:2 b:2]"},
		{[]string{"a", "b"}, 0, "map[]"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			t.Parallel()
			m := mustBuild(t, func(cfg *Config) { cfg.Zones = c.zones; cfg.SeedCount = c.n }, "", "")
			per := map[string]int{}
			for _, r := range m.Seed() {
				per[r.Zone]++
			}
			if fmt.Sprint(per) != c.want {
				t.Fatalf("got %v want %s", per, c.want)
			}
		})
	}
}

func TestBareMetal(t *testing.T) {
	t.Parallel()
	m := mustBuild(t, func(c *Config) { c.CapacityType = BareMetal; c.SeedCount = 2 }, "", "")
	ms := m.Seed()
	if ms[0].ID != "zone-a-bm-kvm-small-0000" || ms[0].CapacityType != record.CapacityBareMetal || ms[0].PricePerHour != 0 {
		t.Fatalf("got %+v", ms[0])
	}
}

func TestOfferingsFile(t *testing.T) {
	t.Parallel()
	types := `[{"name":"kvm.huge","vcpu":32,"memory_mib":65536},{"name":"kvm.small","vcpu":1,"memory_mib":1536}]`
	offs := `[
	 {"instance_type":"kvm.huge","zone":"zone-b","capacity_type":"on_demand","count":2,
	  "resources":{"cpu":"30","memory":"60Gi","nvidia.com/gpu":"1"},"labels":{"team":"ml"}},
	 {"instance_type":"kvm.small","zone":"zone-a","capacity_type":"bare_metal","count":1},
	 {"instance_type":"kvm.large","zone":"zone-a","count":1}]`
	dir := t.TempDir()
	tf, of := filepath.Join(dir, "types.json"), filepath.Join(dir, "offerings.json")
	if err := os.WriteFile(tf, []byte(types), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(of, []byte(offs), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(twoZones)
	cfg.InstanceTypesFile, cfg.OfferingsFile = tf, of
	cfg.Prices = map[string]float64{"kvm.large": 0.05}
	m, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.InstanceTypes()) != 5 {
		t.Fatalf("catalog %v", m.InstanceTypes())
	}
	if it, _ := m.InstanceType("kvm.small"); it.VCPU != 1 {
		t.Fatalf("file did not replace built-in: %+v", it)
	}
	ms := m.Seed()
	var ids []string
	for _, r := range ms {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, " "); got != "zone-b-kvm-huge-0000 zone-b-kvm-huge-0001 zone-a-bm-kvm-small-0000 zone-a-kvm-large-0000" {
		t.Fatalf("ids %s", got)
	}
	huge := ms[0]
	if huge.Resources["nvidia.com/gpu"] != "1" || huge.Allocatable["memory"] != "64Gi" || huge.Allocatable["cpu"] != "32" {
		t.Fatalf("huge %+v", huge)
	}
	if huge.Labels["team"] != "ml" || huge.Labels[LabelZone] != "zone-b" || huge.VCPU != 32 {
		t.Fatalf("huge labels %v", huge.Labels)
	}
	if got := fmt.Sprint(ms[2].Resources); got != "map[cpu:900m memory:1Gi]" {
		t.Fatalf("small resources %s", got)
	}
	if ms[3].PricePerHour != 0.05 || m.Offerings()[2].CapacityType != OnDemand {
		t.Fatalf("large %+v", ms[3])
	}
	huge.Labels["team"] = "changed" // records own their maps
	if m.Seed()[0].Labels["team"] != "ml" || ms[1].Labels["team"] != "ml" {
		t.Fatal("seeded records alias each other")
	}
}

func TestIDsStableWhenGrowing(t *testing.T) {
	t.Parallel()
	small := mustBuild(t, func(c *Config) { c.SeedCount = 10 }, "", "").Seed()
	big := mustBuild(t, func(c *Config) { c.SeedCount = 14 }, "", "").Seed()
	old := map[string]bool{}
	for _, m := range small {
		old[m.ID] = true
	}
	added := 0
	for _, m := range big {
		if !old[m.ID] {
			added++
		}
	}
	if added != 4 {
		t.Fatalf("growing 10→14 added %d new ids", added)
	}
}

func TestResourcesDifferFromAllocatable(t *testing.T) {
	t.Parallel()
	for _, it := range append(BuiltinInstanceTypes(), InstanceType{Name: "t", VCPU: 1, MemoryMiB: 512}, InstanceType{Name: "u", VCPU: 3, MemoryMiB: 1000}) {
		a, r := Allocatable(it), DefaultResources(it)
		if a["cpu"] == r["cpu"] || a["memory"] == r["memory"] || strings.HasPrefix(r["memory"], "0") {
			t.Fatalf("%s: allocatable %v resources %v", it.Name, a, r)
		}
	}
}

func TestMachineIDFormat(t *testing.T) {
	t.Parallel()
	if got := MachineID("zone-a", "kvm.small", record.CapacityOnDemand, 12345); got != "zone-a-kvm-small-12345" {
		t.Fatal(got)
	}
	if got := MachineID("z", "kvm.large", record.CapacityBareMetal, 3); got != "z-bm-kvm-large-0003" {
		t.Fatal(got)
	}
}

func TestSeedLargeIsFastAndUnique(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8000, 100000} {
		m := mustBuild(t, func(c *Config) { c.SeedCount = n }, "", "")
		start := time.Now()
		ms := m.Seed()
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("seeding %d took %v", n, d)
		}
		seen := make(map[string]struct{}, len(ms))
		for _, r := range ms {
			seen[r.ID] = struct{}{}
		}
		if len(ms) != n || len(seen) != n {
			t.Fatalf("n=%d: %d records, %d unique", n, len(ms), len(seen))
		}
	}
}
