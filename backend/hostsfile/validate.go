package hostsfile

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// validate fills defaults and checks each host; messages name the file,
// the host's line and the key at fault.
func (f *File) validate() error {
	if len(f.Hosts) == 0 {
		return fmt.Errorf("--hosts %s: no hosts listed", f.Path)
	}
	var errs []error
	seen := map[string]int{}
	for i := range f.Hosts {
		h := &f.Hosts[i]
		bad := func(key, format string, args ...any) {
			errs = append(errs, fmt.Errorf("--hosts %s:%d: host %q: %s: %s", f.Path, h.Line, h.Name, key, fmt.Sprintf(format, args...)))
		}
		switch {
		case h.Name == "":
			bad("name", "required")
		case !nameRE.MatchString(h.Name):
			bad("name", "want lower-case letters, digits and '-', 1 to 63 characters, starting and ending with a letter or digit")
		case seen[h.Name] != 0:
			bad("name", "already used by the host on line %d", seen[h.Name])
		}
		if h.Name != "" && seen[h.Name] == 0 {
			seen[h.Name] = h.Line
		}
		switch {
		case h.Zone == "":
			bad("zone", "required")
		case !zoneRE.MatchString(h.Zone):
			bad("zone", "want letters, digits, '.', '_' or '-'")
		}
		if strings.TrimSpace(h.URI) == "" && h.Fake == nil {
			bad("uri", "required")
		}
		for k := range h.Labels {
			if k == "" {
				bad("labels", "empty label key")
			}
		}
		checkRatio := func(key string, v *float64) {
			switch {
			case *v == 0:
				*v = DefaultOvercommit
			case *v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0):
				bad("overcommit."+key, "must be > 0 (got %v)", *v)
			}
		}
		checkRatio("cpu", &h.Overcommit.CPU)
		checkRatio("memory", &h.Overcommit.Memory)
		if h.Fake != nil {
			if h.Fake.VCPUs < 0 || h.Fake.MemoryMiB < 0 || h.Fake.PoolGiB < 0 {
				bad("fake", "sizes must not be negative")
			}
			if h.Fake.VCPUs == 0 {
				h.Fake.VCPUs = DefaultFakeVCPUs
			}
			if h.Fake.MemoryMiB == 0 {
				h.Fake.MemoryMiB = DefaultFakeMemoryMiB
			}
			if h.Fake.PoolGiB == 0 {
				h.Fake.PoolGiB = DefaultFakePoolGiB
			}
		}
	}
	return errors.Join(errs...)
}

// Zones lists the zones in order of first appearance.
func (f *File) Zones() []string {
	var out []string
	seen := map[string]bool{}
	for _, h := range f.Hosts {
		if !seen[h.Zone] {
			seen[h.Zone] = true
			out = append(out, h.Zone)
		}
	}
	return out
}

// HasFake reports whether any host has a fake: block (only the fake
// backend accepts one).
func (f *File) HasFake() *Host {
	for i := range f.Hosts {
		if f.Hosts[i].Fake != nil {
			return &f.Hosts[i]
		}
	}
	return nil
}

// FakeSize is the host's fake size, the defaults when it has no block.
func (h Host) FakeSize() Fake {
	if h.Fake != nil {
		return *h.Fake
	}
	return Fake{VCPUs: DefaultFakeVCPUs, MemoryMiB: DefaultFakeMemoryMiB, PoolGiB: DefaultFakePoolGiB}
}
