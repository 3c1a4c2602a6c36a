package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// DefaultZone is the zone a bare --connect URI serves unless --default-zone
// says otherwise.
const DefaultZone = "local"

// Defaults for the knobs of Config that are not flags of the reference CLI.
const (
	DefaultInventoryTimeout = 20 * time.Second
	DefaultReconnectMin     = 500 * time.Millisecond
	DefaultReconnectMax     = 30 * time.Second
	DefaultKeepAliveSecs    = 5
	DefaultKeepAliveCount   = 3
	DefaultAgentTimeout     = guestagent.DefaultCommandTimeout
	DefaultCallTimeout      = 30 * time.Second
	DefaultListConcurrency  = 32
	DefaultBootTimeout      = 10 * time.Minute
)

// Values of --domain-type (hostconn decides what each means on a host).
const (
	DomainTypeAuto = hostconn.DomainTypeAuto // kvm where QEMU can open /dev/kvm, else qemu (TCG)
	DomainTypeKVM  = hostconn.DomainTypeKVM  // hardware acceleration or nothing
	DomainTypeQEMU = hostconn.DomainTypeQEMU // software emulation (TCG)
)

// ValidDomainType checks a --domain-type value ("" means auto).
func ValidDomainType(s string) error { return hostconn.ValidDomainType(s) }

// Host is one libvirt host and the zone it serves.
type Host struct {
	Zone string
	URI  string // raw: may carry credentials' paths; show only Redact(URI)
	// Name is the host's stable name, unique across zones. ParseConnect
	// names a zone's only host after the zone; New does the same for an
	// empty Name.
	Name string
	// Named: placements on this host carry its name (Placement.Host). True
	// for hosts of a --hosts file and of a zone --connect names several
	// times; false for a zone's only --connect host, whose refs stay
	// "zone/domain" as before zones could hold several hosts.
	Named bool
	// Enforce: the host's size and overcommit limit placement (--hosts).
	// --connect hosts are never refused for capacity.
	Enforce          bool
	Labels           map[string]string
	CPUOvercommit    float64 // ≤ 0: 1
	MemoryOvercommit float64 // ≤ 0: 1
	Cordoned         bool    // start cordoned
}

// Config is everything the backend needs. Hosts comes from ParseConnect.
type Config struct {
	Hosts    []Host
	Policy   placement.Policy // --placement; "" is spread
	Provider string           // --provider: the provider instance id, owner of our domains
	Image    string           // --image: golden volume name in Pool
	Pool     string           // --storage-pool
	Network  string           // --network; empty: no NIC

	// Shapes are the instance types' machine shapes by type name
	// (--instance-types); a type not named has the zero shape.
	// ShapeMemoryMiB is each type's memory_mib, which the huge page check
	// at startup compares with the host's reserved pages.
	Shapes         map[string]backend.Shape
	ShapeMemoryMiB map[string]int

	// BaseUserData (--base-user-data) is a cloud-init user-data file served
	// to each guest on a NoCloud seed volume (label "cidata"). Building the
	// ISO needs genisoimage, xorriso or mkisofs on the provider's host.
	BaseUserData string

	// Direct kernel boot (--kernel, --initrd, --cmdline): paths on the host.
	Kernel, Initrd, Cmdline string

	// DomainType (--domain-type): auto, kvm or qemu; "" means auto.
	DomainType string

	// CredentialsDir (--credentials-dir), when set, is the one directory
	// the hosts' URIs may name credentials in (pkipath, keyfile,
	// known_hosts): the mounted Secret. "" leaves those paths unchecked.
	CredentialsDir string

	// MigratePlain (--migrate-tls=false) sends live migrations' memory and
	// disk streams unencrypted. The default is TLS (VIR_MIGRATE_TLS): QEMU
	// to QEMU with each host's /etc/pki/qemu certificates, since the
	// stream carries the guest's RAM (secrets included) between hosts.
	MigratePlain bool

	// AgentTimeout bounds every guest-agent command; Bootstrap tunes the
	// hooks (zero fields take guestagent's defaults).
	AgentTimeout time.Duration
	Bootstrap    guestagent.BootstrapConfig

	// WaitBooted (--wait-booted) makes IDLE mean booted: a Create returns
	// only once the guest agent answers and the image's booted check
	// passes (guestagent.AwaitBooted), a Configure checks it before the
	// bootstrap hook, and a guest started again by reconcile reports
	// "booting" until it passes. False: a Create ends when the domain runs.
	WaitBooted bool
	// BootTimeout bounds the booted check of a guest started again by
	// reconcile (the Create's and Configure's own deadlines bound theirs);
	// ≤ 0: DefaultBootTimeout.
	BootTimeout time.Duration
	// Booted tunes the booted check (zero fields: guestagent's defaults).
	Booted guestagent.BootedConfig

	// CallTimeout (--libvirt-call-timeout) bounds every libvirt call: one
	// past it returns a transient error naming the host and the call.
	CallTimeout time.Duration
	// ListConcurrency (--reconcile-concurrency): hosts listed at once.
	ListConcurrency int
	// MigrateTimeout (--migrate-timeout) is a migration call's own budget
	// on top of CallTimeout.
	MigrateTimeout time.Duration

	InventoryTimeout time.Duration // per host, for Inventory and Hosts
	ReconnectMin     time.Duration // first pause before re-dialling a lost host
	ReconnectMax     time.Duration // cap of that pause
	KeepAliveSecs    int           // watchdog ping interval (hostconn/watch.go)
	KeepAliveCount   uint          // ping intervals of silence before the link is dead

	Logger *slog.Logger
}

func (c *Config) SetDefaults() {
	dur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	dur(&c.AgentTimeout, DefaultAgentTimeout)
	dur(&c.InventoryTimeout, DefaultInventoryTimeout)
	dur(&c.CallTimeout, DefaultCallTimeout)
	dur(&c.MigrateTimeout, 10*time.Minute)
	dur(&c.BootTimeout, DefaultBootTimeout)
	if c.ListConcurrency <= 0 {
		c.ListConcurrency = DefaultListConcurrency
	}
	dur(&c.ReconnectMin, DefaultReconnectMin)
	dur(&c.ReconnectMax, DefaultReconnectMax)
	if c.KeepAliveSecs <= 0 {
		c.KeepAliveSecs = DefaultKeepAliveSecs
	}
	if c.KeepAliveCount == 0 {
		c.KeepAliveCount = DefaultKeepAliveCount
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration; every message names the flag at fault.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Hosts) == 0 {
		errs = append(errs, errors.New("--connect: no libvirt host given"))
	}
	credDir, err := checkCredentialsDir(c.CredentialsDir)
	if err != nil {
		errs = append(errs, err)
	}
	seen, names := map[[2]string]bool{}, map[string]bool{}
	for _, h := range c.Hosts {
		if seen[[2]string{h.Zone, h.URI}] {
			errs = append(errs, fmt.Errorf("--connect: zone %q listed twice with the same URI", h.Zone))
		}
		seen[[2]string{h.Zone, h.URI}] = true
		if h.Name != "" && names[h.Name] {
			errs = append(errs, fmt.Errorf("--connect/--hosts: host name %q used twice", h.Name))
		}
		names[h.Name] = true
		if err := validZone(h.Zone); err != nil {
			errs = append(errs, err)
		}
		// --hosts file URIs come through here too.
		if err := ValidateURIIn(h.URI, credDir); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case c.Provider == "":
		errs = append(errs, errors.New("--provider: required (it marks which domains are ours)"))
	case strings.ContainsRune(c.Provider, 0):
		errs = append(errs, errors.New("--provider: must not contain a NUL byte"))
	}
	if c.Image == "" {
		errs = append(errs, errors.New("--image: required (the golden volume name)"))
	}
	if c.Pool == "" {
		errs = append(errs, errors.New("--storage-pool: required"))
	}
	if (c.Initrd != "" || c.Cmdline != "") && c.Kernel == "" {
		errs = append(errs, errors.New("--initrd/--cmdline: need --kernel"))
	}
	if err := ValidDomainType(c.DomainType); err != nil {
		errs = append(errs, err)
	}
	if c.BaseUserData != "" {
		if err := checkUserData(c.BaseUserData); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkCredentialsDir returns the clean --credentials-dir, refusing one
// that is relative (its meaning would depend on the working directory) or
// not an existing directory (a typo would otherwise refuse every URI, or
// bound nothing the operator meant).
func checkCredentialsDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("--credentials-dir: %q must be an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return "", fmt.Errorf("--credentials-dir: %w", err)
	case !fi.IsDir():
		return "", fmt.Errorf("--credentials-dir: %s is not a directory", dir)
	}
	return dir, nil
}

// checkUserData refuses a --base-user-data we could not serve: an unreadable
// file, or no tool to build the NoCloud ISO with.
func checkUserData(path string) error {
	if _, err := os.ReadFile(path); err != nil {
		return fmt.Errorf("--base-user-data: %w", err)
	}
	if volume.ISOTool() == "" {
		return fmt.Errorf("--base-user-data: building the NoCloud seed needs one of %s on PATH; install one or drop the flag",
			strings.Join(volume.ISOTools, ", "))
	}
	return nil
}

var zoneRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validZone keeps zone names safe inside HostRef.ref ("zone/domain").
func validZone(z string) error {
	if !zoneRE.MatchString(z) {
		return fmt.Errorf("--connect/--default-zone: zone %q: want letters, digits, '.', '_' or '-'", z)
	}
	return nil
}

// ParseConnect reads --connect: a bare URI (served as defaultZone), or a
// comma-separated list of zone=uri pairs, a zone named several times being
// a pool of those hosts. It validates zone names and duplicates, not the
// URIs themselves (Validate does), and names the hosts (connectNames).
func ParseConnect(connect, defaultZone string) ([]Host, error) {
	connect = strings.TrimSpace(connect)
	if connect == "" {
		return nil, errors.New("--connect: empty")
	}
	if defaultZone == "" {
		defaultZone = DefaultZone
	}
	items := strings.Split(connect, ",")
	if _, _, ok := zonePair(items[0]); !ok {
		// A bare URI. Its query may hold '=' and even ',', so take it whole.
		if err := validZone(defaultZone); err != nil {
			return nil, err
		}
		return []Host{{Zone: defaultZone, URI: connect, Name: defaultZone}}, nil
	}
	hosts := make([]Host, 0, len(items))
	seen := map[string]bool{}
	for i, it := range items {
		zone, uri, ok := zonePair(it)
		if !ok {
			return nil, fmt.Errorf("--connect: item %d is not zone=uri (want zone=uri,zone=uri)", i+1)
		}
		if uri == "" {
			return nil, fmt.Errorf("--connect: zone %q has an empty URI", zone)
		}
		if err := validZone(zone); err != nil {
			return nil, err
		}
		if seen[zone+"="+uri] {
			return nil, fmt.Errorf("--connect: zone %q listed twice with the same URI", zone)
		}
		seen[zone+"="+uri] = true
		hosts = append(hosts, Host{Zone: zone, URI: uri})
	}
	connectNames(hosts)
	return hosts, nil
}

// zonePair splits "zone=uri". The zone part must not look like part of a
// URI (no ':', '/', '?'), which is how a bare URI with '=' in its query is
// told apart.
func zonePair(s string) (zone, uri string, ok bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexByte(s, '=')
	if i <= 0 || strings.ContainsAny(s[:i], ":/?@ ") {
		return "", "", false
	}
	return s[:i], strings.TrimSpace(s[i+1:]), true
}
