package capacity

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Default hourly prices of the --price-per-vcpu-hour / --price-per-gib-hour
// flags. They are nominal: libvirt capacity is owned, so the price only
// lets BigFleet rank shapes.
const (
	DefaultPricePerVCPUHour = 0.0030
	DefaultPricePerGiBHour  = 0.0008
)

// ParsePrices parses --prices, e.g. "kvm.small=0.01,kvm.large=0.05", into
// per-type hourly prices. Values must be finite and >= 0; a name may appear
// once. Whether the names exist is checked by Load, which knows the catalog.
// The empty string means no overrides.
func ParsePrices(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, item := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || name == "" || val == "" {
			return nil, fmt.Errorf("--prices: entry %d %q is not TYPE=PRICE", i, item)
		}
		p, err := parsePrice(val)
		if err != nil {
			return nil, fmt.Errorf("--prices: entry %d (%s): %w", i, name, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--prices: entry %d: %s given twice", i, name)
		}
		out[name] = p
	}
	return out, nil
}

func parsePrice(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("price %q is not a number", s)
	}
	return p, checkPrice(p)
}

func checkPrice(p float64) error {
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return fmt.Errorf("price %v is not finite", p)
	}
	if p < 0 {
		return fmt.Errorf("price %v is negative", p)
	}
	return nil
}

// hourlyPrice is the on-demand price of a type: the override if given,
// else the per-vCPU plus per-GiB formula.
func hourlyPrice(it InstanceType, overrides map[string]float64, perVCPU, perGiB float64) float64 {
	if p, ok := overrides[it.Name]; ok {
		return p
	}
	return perVCPU*float64(it.VCPU) + perGiB*float64(it.MemoryMiB)/1024
}
