package libvirt

import "github.com/bigfleet/libvirt-provider/backend/libvirt/config"

// The configuration lives in backend/libvirt/config; these are the names
// callers of New use, kept here so that they need not know the sub-package.
type (
	Config = config.Config
	Host   = config.Host
)

// Values of --domain-type.
const (
	DomainTypeAuto = config.DomainTypeAuto
	DomainTypeKVM  = config.DomainTypeKVM
	DomainTypeQEMU = config.DomainTypeQEMU
)

// ParseConnect reads --connect (config.ParseConnect).
func ParseConnect(connect, defaultZone string) ([]Host, error) {
	return config.ParseConnect(connect, defaultZone)
}

// ValidDomainType checks a --domain-type value (config.ValidDomainType).
func ValidDomainType(s string) error { return config.ValidDomainType(s) }
