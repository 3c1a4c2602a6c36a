package capacity

import (
	"math"
	"testing"
)

func nan() float64 { return math.NaN() }

func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{"", "kvm.small=0.01,kvm.large=0.05", "a=NaN", "=", ",,", "a=1,a=1", "x=0x1p-2", "a=-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParsePrices(s)
		if err != nil {
			return
		}
		for k, v := range m {
			if k == "" || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("accepted %q=%v from %q", k, v, s)
			}
		}
	})
}

func FuzzDecodeOfferings(f *testing.F) {
	for _, s := range []string{`[]`, `null`, `[null]`, `[{"instance_type":"kvm.small","zone":"zone-a","count":3}]`,
		`[{"count":-1,"labels":{"a":"b"},"resources":{"cpu":"1"}}]`, `[{}] []`, `{"a":1}`, `[1,2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		offs, err := DecodeOfferings(data)
		if err != nil {
			return
		}
		// Whatever decodes must validate or fail cleanly, never panic, and
		// a model that builds must seed exactly Size records.
		m, err := Build(DefaultConfig(twoZones), nil, data)
		if err != nil {
			return
		}
		if len(offs) != len(m.Offerings()) {
			t.Fatalf("offerings %d vs %d", len(offs), len(m.Offerings()))
		}
		if m.Size() <= 10000 && len(m.Seed()) != m.Size() {
			t.Fatal("seed size mismatch")
		}
	})
}

func FuzzParseInstanceTypes(f *testing.F) {
	for _, s := range []string{`[]`, `[{"name":"kvm.huge","vcpu":32,"memory_mib":65536}]`, `[{"name":""}]`, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		types, err := ParseInstanceTypes(data)
		if err != nil {
			return
		}
		for _, it := range types {
			if it.Name == "" || it.VCPU <= 0 || it.MemoryMiB <= 0 {
				t.Fatalf("accepted invalid %+v", it)
			}
		}
	})
}
