package capacity

import (
	"math"
	"strings"
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
	for _, s := range []string{`[]`, `[{"name":"kvm.huge","vcpu":32,"memory_mib":65536}]`, `[{"name":""}]`, `x`, fullShapeJSON,
		`[{"name":"a","vcpu":2,"memory_mib":1,"cpu":{"sockets":2,"cores":1,"threads":1},"network":[]}]`,
		`[{"name":"a","vcpu":1,"memory_mib":1,"hugepages":"1G","network":[{"bridge":"br0","model":"e1000"}]}]`} {
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
			// An accepted shape is one the backend can render as is.
			s := it.Shape()
			if c := s.CPU; c.Sockets != 0 && c.Sockets*c.Cores*c.Threads != it.VCPU {
				t.Fatalf("accepted topology %+v for vcpu %d", c, it.VCPU)
			}
			if s.DiskGiB < 0 || (s.Firmware != "" && s.Firmware != "bios" && !s.UEFI()) ||
				(it.HugePages != "" && s.HugePageKiB == 0) {
				t.Fatalf("accepted shape %+v from %+v", s, it)
			}
			for _, n := range s.NICs {
				if (n.Network == "") == (n.Bridge == "") || strings.ContainsAny(n.Network+n.Bridge, "/<>'\" \x00") {
					t.Fatalf("accepted NIC %+v", n)
				}
			}
		}
	})
}
