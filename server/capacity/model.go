package capacity

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
)

// DefaultSeedCount is the default of --seed-count.
const DefaultSeedCount = 32

// Config is the capacity part of the command line, already split into
// values by cmd. Start from DefaultConfig: the zero Config seeds no slots
// and prices everything at zero.
type Config struct {
	InstanceTypesFile string // --instance-types; "" = built-ins only
	OfferingsFile     string // --offerings; "" = DefaultOfferings
	SeedCount         int    // --seed-count, used without an offerings file
	CapacityType      string // --capacity-type for the default offerings
	PricePerVCPUHour  float64
	PricePerGiBHour   float64
	Prices            map[string]float64 // --prices, see ParsePrices
	// Zones are the zones the backend serves. Offerings must name one of
	// them (if non-empty), and default offerings are spread over them.
	Zones []string
}

// DefaultConfig returns the flag defaults for the given zones.
func DefaultConfig(zones []string) Config {
	return Config{
		SeedCount:        DefaultSeedCount,
		CapacityType:     OnDemand,
		PricePerVCPUHour: DefaultPricePerVCPUHour,
		PricePerGiBHour:  DefaultPricePerGiBHour,
		Zones:            zones,
	}
}

// Load reads the files named in cfg and builds the model (see Build).
func Load(cfg Config) (*Model, error) {
	var typesJSON, offeringsJSON []byte
	var err error
	if cfg.InstanceTypesFile != "" {
		if typesJSON, err = os.ReadFile(cfg.InstanceTypesFile); err != nil {
			return nil, fmt.Errorf("--instance-types: %w", err)
		}
	}
	if cfg.OfferingsFile != "" {
		if offeringsJSON, err = os.ReadFile(cfg.OfferingsFile); err != nil {
			return nil, fmt.Errorf("--offerings: %w", err)
		}
	}
	return Build(cfg, typesJSON, offeringsJSON)
}

// Build validates everything and returns the model. typesJSON and
// offeringsJSON are file contents; nil means the flag was not given (the
// file paths in cfg are ignored).
func Build(cfg Config, typesJSON, offeringsJSON []byte) (*Model, error) {
	zones := dedupe(cfg.Zones)
	for _, z := range zones {
		if err := checkName("zone", z); err != nil {
			return nil, fmt.Errorf("served zones: %w", err)
		}
	}
	types, err := buildCatalog(typesJSON)
	if err != nil {
		return nil, err
	}
	if err := checkPricing(cfg, types); err != nil {
		return nil, err
	}
	offs, err := buildOfferings(cfg, zones, offeringsJSON)
	if err != nil {
		return nil, err
	}
	if err := validateOfferings(offs, types, zones); err != nil {
		return nil, err
	}
	return newModel(cfg, types, offs), nil
}

func buildCatalog(typesJSON []byte) (map[string]InstanceType, error) {
	var extra []InstanceType
	if typesJSON != nil {
		var err error
		if extra, err = ParseInstanceTypes(typesJSON); err != nil {
			return nil, err
		}
	}
	return mergeInstanceTypes(BuiltinInstanceTypes(), extra), nil
}

func checkPricing(cfg Config, types map[string]InstanceType) error {
	if err := checkPrice(cfg.PricePerVCPUHour); err != nil {
		return fmt.Errorf("--price-per-vcpu-hour: %w", err)
	}
	if err := checkPrice(cfg.PricePerGiBHour); err != nil {
		return fmt.Errorf("--price-per-gib-hour: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Prices)) {
		if _, ok := types[name]; !ok {
			return fmt.Errorf("--prices: unknown instance type %q", name)
		}
		if err := checkPrice(cfg.Prices[name]); err != nil {
			return fmt.Errorf("--prices: %s: %w", name, err)
		}
	}
	return nil
}

func buildOfferings(cfg Config, zones []string, offeringsJSON []byte) ([]Offering, error) {
	if offeringsJSON != nil {
		return DecodeOfferings(offeringsJSON)
	}
	if _, err := ParseCapacityType(cfg.CapacityType); err != nil {
		return nil, fmt.Errorf("--capacity-type: %w", err)
	}
	if cfg.SeedCount < 0 || cfg.SeedCount > MaxSlots {
		return nil, fmt.Errorf("--seed-count %d must be >= 0 (and at most %d)", cfg.SeedCount, MaxSlots)
	}
	if len(zones) == 0 {
		return nil, errors.New("no zones to place the default offerings in")
	}
	return DefaultOfferings(cfg.SeedCount, zones, cfg.CapacityType), nil
}

func dedupe(zones []string) []string {
	var out []string
	for _, z := range zones {
		if !slices.Contains(out, z) {
			out = append(out, z)
		}
	}
	return out
}
