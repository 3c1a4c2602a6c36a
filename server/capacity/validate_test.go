package capacity

import (
	"strings"
	"testing"
)

var twoZones = []string{"zone-a", "zone-b"}

// build is Build with the flag defaults over zone-a and zone-b.
func build(t *testing.T, mut func(*Config), typesJSON, offeringsJSON string) (*Model, error) {
	t.Helper()
	cfg := DefaultConfig(twoZones)
	if mut != nil {
		mut(&cfg)
	}
	var tj, oj []byte
	if typesJSON != "" {
		tj = []byte(typesJSON)
	}
	if offeringsJSON != "" {
		oj = []byte(offeringsJSON)
	}
	return Build(cfg, tj, oj)
}

func TestOfferingValidation(t *testing.T) {
	t.Parallel()
	ok := `{"instance_type":"kvm.small","zone":"zone-a","capacity_type":"on_demand","count":1}`
	cases := []struct{ name, json, want string }{
		{"unknown type", `[` + ok + `,{"instance_type":"kvm.tiny","zone":"zone-a","capacity_type":"on_demand","count":1}]`,
			`offerings[1]: unknown instance_type "kvm.tiny"`},
		{"empty type", `[{"zone":"zone-a","count":1}]`, `offerings[0]: instance_type must not be empty`},
		{"spot", `[` + ok + `,{"instance_type":"kvm.small","zone":"zone-b","capacity_type":"spot","count":1}]`,
			`offerings[1]: capacity_type "spot" is not offered by libvirt (on_demand or bare_metal)`},
		{"reserved", `[{"instance_type":"kvm.small","zone":"zone-a","capacity_type":"reserved","count":1}]`,
			`offerings[0]: capacity_type "reserved" is not offered`},
		{"negative count", `[{"instance_type":"kvm.small","zone":"zone-a","count":-1}]`, `offerings[0]: count -1 must be >= 0`},
		{"huge count", `[{"instance_type":"kvm.small","zone":"zone-a","count":1000001}]`, `offerings[0]: count 1000001 must be >= 0`},
		{"total too big", `[{"instance_type":"kvm.small","zone":"zone-a","count":600000},{"instance_type":"kvm.small","zone":"zone-b","count":600000}]`,
			`offerings[1]: total count exceeds 1000000`},
		{"fractional count", `[{"instance_type":"kvm.small","zone":"zone-a","count":1.5}]`, `offerings[0]: `},
		{"unknown field", `[` + ok + `,{"instance_type":"kvm.small","zone":"zone-b","count":1,"cnt":2}]`,
			`offerings[1]: unknown field "cnt"`},
		{"empty zone", `[{"instance_type":"kvm.small","count":1}]`, `offerings[0]: zone must not be empty`},
		{"bad zone chars", `[{"instance_type":"kvm.small","zone":"zone a","count":1}]`, `offerings[0]: zone "zone a" may only contain`},
		{"unserved zone", `[` + ok + `,{"instance_type":"kvm.small","zone":"zone-c","count":1}]`,
			`offerings[1]: zone "zone-c" is not served`},
		{"unserved zone only", `[{"instance_type":"kvm.small","zone":"zone-c","count":1}]`,
			`offerings[0]: zone "zone-c" is not served by this provider (serves zone-a, zone-b)`},
		{"duplicate", `[` + ok + `,{"instance_type":"kvm.small","zone":"zone-a","count":3}]`,
			`offerings[1]: duplicates offerings[0] (instance_type "kvm.small", zone "zone-a", capacity_type "on_demand")`},
		{"empty resource name", `[{"instance_type":"kvm.small","zone":"zone-a","count":1,"resources":{"":"1"}}]`,
			`offerings[0]: resources: empty resource name`},
		{"empty quantity", `[{"instance_type":"kvm.small","zone":"zone-a","count":1,"resources":{"cpu":" "}}]`,
			`offerings[0]: resources["cpu"]: empty quantity`},
		{"empty label key", `[{"instance_type":"kvm.small","zone":"zone-a","count":1,"labels":{"":"x"}}]`,
			`offerings[0]: labels: empty label key`},
		{"label hides zone", `[{"instance_type":"kvm.small","zone":"zone-a","count":1,"labels":{"topology.kubernetes.io/zone":"zone-b"}}]`,
			`offerings[0]: labels["topology.kubernetes.io/zone"] = "zone-b" contradicts the offering's "zone-a"`},
		{"label hides type", `[{"instance_type":"kvm.small","zone":"zone-a","count":1,"labels":{"node.kubernetes.io/instance-type":"kvm.large"}}]`,
			`offerings[0]: labels["node.kubernetes.io/instance-type"] = "kvm.large" contradicts`},
		{"not an array", `{"instance_type":"kvm.small"}`, `offerings: expected a JSON array`},
		{"null", `null`, `offerings: expected a JSON array`},
		{"null entry", `[null]`, `offerings[0]: expected a JSON object`},
		{"trailing junk", `[] x`, `offerings: unexpected data after the JSON value`},
		{"syntax", `[{`, `offerings: `},
		{"wrong type", `[{"instance_type":5}]`, `offerings[0]: `},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := build(t, nil, "", c.json)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestIDCollisionRefused(t *testing.T) {
	t.Parallel()
	types := `[{"name":"kvm-small","vcpu":1,"memory_mib":1024}]`
	offs := `[{"instance_type":"kvm.small","zone":"z","count":1},{"instance_type":"kvm-small","zone":"z","count":1}]`
	_, err := Build(DefaultConfig(nil), []byte(types), []byte(offs))
	want := `offerings[1]: machine ids "z-kvm-small"-NNNN would collide with offerings[0]`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestInstanceTypeValidation(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, json, want string }{
		{"empty name", `[{"name":"","vcpu":1,"memory_mib":1}]`, `instance_types[0]: name must not be empty`},
		{"bad name", `[{"name":"a/b","vcpu":1,"memory_mib":1}]`, `instance_types[0]: name "a/b" may only contain`},
		{"long name", `[{"name":"` + strings.Repeat("a", 64) + `","vcpu":1,"memory_mib":1}]`, `instance_types[0]: name "aaa`},
		{"dup", `[{"name":"x","vcpu":1,"memory_mib":1},{"name":"x","vcpu":2,"memory_mib":2}]`,
			`instance_types[1]: name "x" duplicates instance_types[0]`},
		{"zero vcpu", `[{"name":"x","vcpu":1,"memory_mib":1},{"name":"y","vcpu":0,"memory_mib":1}]`,
			`instance_types[1]: vcpu 0 must be > 0`},
		{"huge vcpu", `[{"name":"x","vcpu":70000,"memory_mib":1}]`, `instance_types[0]: vcpu 70000 must be > 0 (and at most 65536)`},
		{"zero memory", `[{"name":"x","vcpu":1}]`, `instance_types[0]: memory_mib 0 must be > 0`},
		{"negative memory", `[{"name":"x","vcpu":1,"memory_mib":-5}]`, `instance_types[0]: memory_mib -5 must be > 0`},
		{"unknown field", `[{"name":"x","vcpu":1,"memory":1}]`, `instance_types[0]: unknown field "memory"`},
		{"not array", `{}`, `instance_types: expected a JSON array`},
		{"scalar entry", `[1]`, `instance_types[0]: expected a JSON object`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := build(t, nil, c.json, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"capacity type", func(c *Config) { c.CapacityType = "spot" }, `--capacity-type: capacity_type "spot" is not offered`},
		{"seed count", func(c *Config) { c.SeedCount = -1 }, `--seed-count -1 must be >= 0`},
		{"no zones", func(c *Config) { c.Zones = nil }, `no zones to place the default offerings in`},
		{"bad zone", func(c *Config) { c.Zones = []string{"a b"} }, `served zones: zone "a b" may only contain`},
		{"vcpu price", func(c *Config) { c.PricePerVCPUHour = -1 }, `--price-per-vcpu-hour: price -1 is negative`},
		{"gib price", func(c *Config) { c.PricePerGiBHour = nan() }, `--price-per-gib-hour: price NaN is not finite`},
		{"unknown price type", func(c *Config) { c.Prices = map[string]float64{"kvm.tiny": 1} }, `--prices: unknown instance type "kvm.tiny"`},
		{"bad price", func(c *Config) { c.Prices = map[string]float64{"kvm.small": -2} }, `--prices: kvm.small: price -2 is negative`},
		{"missing file", func(c *Config) { c.OfferingsFile = "/nonexistent/offerings.json" }, `--offerings: open /nonexistent`},
		{"missing types file", func(c *Config) { c.InstanceTypesFile = "/nonexistent/t.json" }, `--instance-types: open /nonexistent`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig(twoZones)
			c.mut(&cfg)
			_, err := Load(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestParsePrices(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want map[string]float64
		err  string
	}{
		{"", map[string]float64{}, ""},
		{"  ", map[string]float64{}, ""},
		{"kvm.small=0.01,kvm.large=0.05", map[string]float64{"kvm.small": 0.01, "kvm.large": 0.05}, ""},
		{" kvm.small = 0 ", map[string]float64{"kvm.small": 0}, ""},
		{"kvm.small", nil, `--prices: entry 0 "kvm.small" is not TYPE=PRICE`},
		{"kvm.small=0.1,", nil, `--prices: entry 1 "" is not TYPE=PRICE`},
		{"=1", nil, `entry 0 "=1" is not TYPE=PRICE`},
		{"kvm.small=", nil, `is not TYPE=PRICE`},
		{"kvm.small=abc", nil, `--prices: entry 0 (kvm.small): price "abc" is not a number`},
		{"kvm.small=-1", nil, `price -1 is negative`},
		{"kvm.small=NaN", nil, `price NaN is not finite`},
		{"kvm.small=+Inf", nil, `price +Inf is not finite`},
		{"kvm.small=1e400", nil, `is not a number`},
		{"kvm.small=1,kvm.small=2", nil, `--prices: entry 1: kvm.small given twice`},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePrices(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || len(got) != len(c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Fatalf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
