package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt"
	"github.com/bigfleet/libvirt-provider/backend/placement"
	"github.com/bigfleet/libvirt-provider/server/capacity"
	"github.com/bigfleet/libvirt-provider/server/tlsreload"
)

// config is the parsed command line. Field comments name the flag.
type config struct {
	Addr        string // --addr
	MetricsAddr string // --metrics-addr
	Reflection  bool   // --reflection
	TLSCert     string // --tls-cert
	TLSKey      string // --tls-key
	TLSCA       string // --tls-ca

	TLSReloadInterval time.Duration // --tls-reload-interval
	CallerIdentity    string        // --caller-identity

	Provider    string // --provider
	Connect     string // --connect
	DefaultZone string // --default-zone
	HostsFile   string // --hosts
	Placement   string // --placement

	CredentialsDir string // --credentials-dir
	MigrateTLS     bool   // --migrate-tls

	Offerings        string  // --offerings
	SeedCount        int     // --seed-count
	CapacityType     string  // --capacity-type
	InstanceTypes    string  // --instance-types
	Prices           string  // --prices
	PricePerVCPUHour float64 // --price-per-vcpu-hour
	PricePerGiBHour  float64 // --price-per-gib-hour

	State string // --state

	// The libvirt backend's flags (see openLibvirt).
	Image        string // --image
	StoragePool  string // --storage-pool
	Network      string // --network
	BaseUserData string // --base-user-data
	Kernel       string // --kernel
	Initrd       string // --initrd
	Cmdline      string // --cmdline
	DomainType   string // --domain-type

	UseFakeBackend bool          // --use-fake-backend
	FakeDelay      time.Duration // --fake-delay
	FakeZones      string        // --fake-zones

	ReconcileInterval time.Duration // --reconcile-interval
	CreateTimeout     time.Duration // --create-timeout
	ConfigureTimeout  time.Duration // --configure-timeout
	DrainTimeout      time.Duration // --drain-timeout
	DeleteTimeout     time.Duration // --delete-timeout
	MigrateTimeout    time.Duration // --migrate-timeout
	ShutdownTimeout   time.Duration // --shutdown-timeout
	AgentTimeout      time.Duration // --agent-timeout
	WaitBooted        bool          // --wait-booted
	AgentWait         time.Duration // --agent-wait
	DrainMargin       time.Duration // --drain-margin

	LibvirtCallTimeout   time.Duration // --libvirt-call-timeout
	ReconcileConcurrency int           // --reconcile-concurrency
	RestartMaxTries      int           // --restart-max-tries
	RestartBackoff       time.Duration // --restart-backoff

	LogLevel   string // --log-level
	LogFormat  string // --log-format
	AdminWrite bool   // --admin-write

	AdminClients string // --admin-clients
	AdminAddr    string // --admin-addr
	AdminTLSCA   string // --admin-tls-ca

	FenceCommand  string        // --fence-command
	HostDownAfter time.Duration // --host-down-after
	FenceTimeout  time.Duration // --fence-timeout
	leaderFlags                 // --leader-elect and its settings (ha.go)
}

const defaultFenceTimeout = 2 * time.Minute

// newFlagSet declares every flag with its default and a description an
// operator can act on. Names follow the reference provider so existing
// command lines keep working.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("libvirt", flag.ContinueOnError)
	fs.StringVar(&c.Addr, "addr", ":9000", "`address` serving CapacityProvider (gRPC, gRPC-Web, Connect), grpc.health.v1 and reflection")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", ":9090", "`address` for /metrics, /healthz and /readyz; empty disables")
	fs.BoolVar(&c.Reflection, "reflection", true, "serve gRPC server reflection (v1 and v1alpha) on --addr")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate `file` for --addr; with --tls-key enables TLS 1.3")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key `file` matching --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM CA bundle `file`; clients must present a certificate it signed (mTLS)")
	fs.StringVar(&c.CallerIdentity, "caller-identity", "", "under mTLS, who may call what (BigFleet ADR-0048): bigfleet binds each call to its certificate's bigfleet:// URI SAN (a shard mutates only with its own shard_id; readonly and admin only read; the admin API's reads need admin or readonly, or a certificate --admin-clients lists); any lets every certificate the CA signed make any call (a mesh that terminates TLS, a migration period). Default: bigfleet under mTLS; plaintext and server-only TLS carry no identity")
	fs.DurationVar(&c.TLSReloadInterval, "tls-reload-interval", tlsreload.DefaultInterval, "how often the TLS files are re-read; changed files apply to new connections")

	fs.StringVar(&c.Provider, "provider", "libvirt", "provider `name` reported as HostRef.provider; must stay stable for a state file")
	fs.StringVar(&c.Connect, "connect", "", "libvirt `URI`, or comma-separated zone=URI list (one host per zone); a bare URI serves --default-zone")
	fs.StringVar(&c.HostsFile, "hosts", "", "YAML `file` naming each hypervisor (name, zone, uri, labels, overcommit, cordoned); instead of --connect")
	fs.StringVar(&c.CredentialsDir, "credentials-dir", "", "`directory` (e.g. the mounted Secret) that every libvirt URI's pkipath, keyfile and known_hosts must lie inside; empty: not checked")
	fs.StringVar(&c.Placement, "placement", string(placement.Spread), "how a Create picks a host of its zone: spread (most free memory) or pack (least free memory that fits)")
	fs.StringVar(&c.DefaultZone, "default-zone", "local", "`zone` of a bare --connect URI (and of the fake backend)")

	fs.StringVar(&c.Offerings, "offerings", "", "JSON `file` of offerings (instance type, zone, capacity type, count); empty: --seed-count slots spread over the zones")
	fs.IntVar(&c.SeedCount, "seed-count", capacity.DefaultSeedCount, "speculative slots to offer when --offerings is empty")
	fs.StringVar(&c.CapacityType, "capacity-type", capacity.OnDemand, "capacity type of the default offerings: on_demand or bare_metal")
	fs.StringVar(&c.InstanceTypes, "instance-types", "", "JSON `file` of extra instance types (merged over the built-in catalog)")
	fs.StringVar(&c.Prices, "prices", "", "per-instance-type hourly price overrides, e.g. kvm.small=0.02,kvm.large=0.09")
	fs.Float64Var(&c.PricePerVCPUHour, "price-per-vcpu-hour", capacity.DefaultPricePerVCPUHour, "hourly price of one vCPU, for types without a --prices entry")
	fs.Float64Var(&c.PricePerGiBHour, "price-per-gib-hour", capacity.DefaultPricePerGiBHour, "hourly price of one GiB of memory, for types without a --prices entry")

	fs.StringVar(&c.State, "state", "", "state `file` (bbolt), with the admin API's host cordons and down declarations beside it in FILE.cordons.json and FILE.down.json; empty keeps them in memory and LOSES them on exit")

	fs.StringVar(&c.Image, "image", "", "golden image `volume` in --storage-pool that VM disks are copy-on-write overlays of")
	fs.StringVar(&c.StoragePool, "storage-pool", "default", "libvirt storage `pool` holding the golden image and VM volumes")
	fs.StringVar(&c.Network, "network", "default", "libvirt `network` VM NICs attach to")
	fs.StringVar(&c.BaseUserData, "base-user-data", "", "cloud-init user-data `file` delivered to every VM via a NoCloud seed")
	fs.StringVar(&c.Kernel, "kernel", "", "kernel `path` on the host for direct kernel boot (optional)")
	fs.StringVar(&c.Initrd, "initrd", "", "initrd `path` on the host for direct kernel boot (with --kernel)")
	fs.StringVar(&c.Cmdline, "cmdline", "", "kernel command line for direct kernel boot (with --kernel)")
	fs.StringVar(&c.DomainType, "domain-type", libvirt.DomainTypeAuto, "libvirt domain `type`: auto (kvm when QEMU can open /dev/kvm, else qemu/TCG), kvm (refuse hosts where it cannot start) or qemu")

	fs.BoolVar(&c.UseFakeBackend, "use-fake-backend", false, "serve an in-memory fake substrate instead of libvirt (conformance/dev only, NOT for production)")
	fs.DurationVar(&c.FakeDelay, "fake-delay", 0, "with --use-fake-backend: how long each fake operation takes")
	fs.StringVar(&c.FakeZones, "fake-zones", "", "with --use-fake-backend: comma-separated zones to simulate (default zone-a,zone-b)")

	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", 2*time.Minute, "how often to compare libvirt with the state file; 0 only at startup")
	fs.DurationVar(&c.CreateTimeout, "create-timeout", 10*time.Minute, "a Create not finished within this goes FAILED")
	fs.DurationVar(&c.ConfigureTimeout, "configure-timeout", 15*time.Minute, "a Configure (bootstrap + readiness) not finished within this goes FAILED")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 15*time.Minute, "a Drain not finished within this goes FAILED")
	fs.DurationVar(&c.DeleteTimeout, "delete-timeout", 10*time.Minute, "a Delete not finished within this goes FAILED")
	fs.BoolVar(&c.MigrateTLS, "migrate-tls", true, "encrypt live migrations (VIR_MIGRATE_TLS: each host needs QEMU's TLS certificates in /etc/pki/qemu); false sends guest RAM and disks in the clear")
	fs.DurationVar(&c.MigrateTimeout, "migrate-timeout", 10*time.Minute, "an admin MigrateMachine not finished within this is aborted (the VM stays on its host)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "on SIGTERM, how long in-flight RPCs and transitions may take to finish before they are cancelled")
	fs.DurationVar(&c.AgentTimeout, "agent-timeout", 10*time.Second, "libvirt: bound on every single guest-agent command")
	fs.BoolVar(&c.WaitBooted, "wait-booted", true, "libvirt: IDLE means booted: a Create ends IDLE only once the guest agent answers and the image's booted check passes (/opt/bigfleet/booted, else systemctl is-system-running; docs/image-contract.md), within --create-timeout; a Configure checks it first; false: IDLE as soon as the domain runs")
	fs.DurationVar(&c.AgentWait, "agent-wait", 2*time.Minute, "libvirt: how long Configure waits for the guest agent's first answer")
	fs.DurationVar(&c.LibvirtCallTimeout, "libvirt-call-timeout", 30*time.Second, "libvirt: bound on every single libvirt call (a guest-agent command or a migration gets its own bound on top); a call past it fails as transient, naming the host and the call")
	fs.IntVar(&c.ReconcileConcurrency, "reconcile-concurrency", 32, "how many hosts reconcile lists at once (and the bound on its parallel restarts and lookups)")
	fs.IntVar(&c.RestartMaxTries, "restart-max-tries", 5, "reconcile restarts an IDLE machine's stopped domain at most this many times in a row (backing off between tries) before giving up; 0 never restarts")
	fs.DurationVar(&c.RestartBackoff, "restart-backoff", 30*time.Second, "wait before the second restart of a stopped IDLE domain; doubles on every further try, capped at 32 times this")
	fs.DurationVar(&c.DrainMargin, "drain-margin", 30*time.Second, "libvirt: time past the grace period before a drain hook is abandoned for the forced mode (also the forced mode's budget)")

	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	fs.BoolVar(&c.AdminWrite, "admin-write", false, "allow the admin API's mutating calls to --admin-clients (read-only when false); needs mTLS on the listener serving the admin API")
	fs.StringVar(&c.AdminClients, "admin-clients", "", "comma-separated `patterns` of verified client certificates that may write (with --admin-write), matched against DNS/URI/email SANs (CN only without SANs): exact, or *.domain for one more DNS label; empty allows nobody")
	fs.StringVar(&c.AdminAddr, "admin-addr", "", "`address` serving only the admin API and page (with --tls-cert/--tls-key, and --admin-tls-ca or --tls-ca); empty serves them on --addr")
	fs.StringVar(&c.AdminTLSCA, "admin-tls-ca", "", "PEM CA bundle `file` that --admin-addr verifies client certificates against (default --tls-ca)")
	fs.StringVar(&c.FenceCommand, "fence-command", "", "absolute `path` of the operator's fence command (an IPMI or Redfish power-off), run as PATH ZONE HOST for a host unreachable for --host-down-after; exit 0 declares the host down (as libvirtctl down does). Never run while no other host answers")
	fs.DurationVar(&c.HostDownAfter, "host-down-after", 0, "how long a host must be unreachable before --fence-command runs for it (at least 10s); 0: hosts are declared down only by an operator")
	fs.DurationVar(&c.FenceTimeout, "fence-timeout", defaultFenceTimeout, "bound on one run of --fence-command; a command past it is killed and counts as failed")
	addLeaderFlags(fs, &c.leaderFlags)
	return fs
}

// validate refuses command lines that cannot work, before anything is
// opened or bound; every message names the flag to change.
func (c *config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Connect != "" && c.HostsFile != "":
		bad("--connect and --hosts are mutually exclusive: name the hosts in one place")
	case c.Connect == "" && c.HostsFile == "" && !c.UseFakeBackend:
		bad("--connect is required: name the libvirt host(s) to serve (or pass --use-fake-backend for a test substrate); or list them in a --hosts file")
	case c.Connect != "" && c.UseFakeBackend:
		bad("--connect and --use-fake-backend are mutually exclusive: choose real libvirt hosts or the fake")
	}
	if c.HostsFile != "" && c.FakeZones != "" {
		bad("--hosts and --fake-zones are mutually exclusive: the hosts file names the zones")
	}
	if _, err := placement.ParsePolicy(c.Placement); err != nil || c.Placement == "" {
		bad("--placement %q: want spread or pack", c.Placement)
	}
	if strings.TrimSpace(c.Addr) == "" {
		bad("--addr must not be empty")
	}
	if strings.TrimSpace(c.Provider) == "" {
		bad("--provider must not be empty")
	}
	if strings.TrimSpace(c.DefaultZone) == "" {
		bad("--default-zone must not be empty")
	}
	if c.ReconcileConcurrency < 1 {
		bad("--reconcile-concurrency must be at least 1 (got %d)", c.ReconcileConcurrency)
	}
	if c.RestartMaxTries < 0 || c.RestartMaxTries > 31 {
		bad("--restart-max-tries must be between 0 and 31 (got %d): the machine's history keeps the last 32 entries, the tries among them", c.RestartMaxTries)
	}
	if c.SeedCount < 0 {
		bad("--seed-count must not be negative (got %d)", c.SeedCount)
	}
	if _, err := capacity.ParseCapacityType(c.CapacityType); err != nil || c.CapacityType == "" {
		bad("--capacity-type %q: want %s or %s", c.CapacityType, capacity.OnDemand, capacity.BareMetal)
	}
	for name, d := range map[string]time.Duration{
		"--create-timeout": c.CreateTimeout, "--configure-timeout": c.ConfigureTimeout,
		"--drain-timeout": c.DrainTimeout, "--delete-timeout": c.DeleteTimeout,
		"--migrate-timeout": c.MigrateTimeout,
		"--agent-timeout":   c.AgentTimeout, "--agent-wait": c.AgentWait, "--drain-margin": c.DrainMargin,
		"--libvirt-call-timeout": c.LibvirtCallTimeout, "--restart-backoff": c.RestartBackoff,
	} {
		if d <= 0 {
			bad("%s must be positive (got %v)", name, d)
		}
	}
	for name, d := range map[string]time.Duration{
		"--reconcile-interval": c.ReconcileInterval, "--fake-delay": c.FakeDelay, "--shutdown-timeout": c.ShutdownTimeout,
		"--tls-reload-interval": c.TLSReloadInterval, // 0: tlsreload.DefaultInterval
	} {
		if d < 0 {
			bad("%s must not be negative (got %v)", name, d)
		}
	}
	if !c.UseFakeBackend && (c.FakeDelay != 0 || c.FakeZones != "") {
		bad("--fake-delay and --fake-zones need --use-fake-backend")
	}
	if (c.Initrd != "" || c.Cmdline != "") && c.Kernel == "" {
		bad("--initrd and --cmdline need --kernel")
	}
	if err := libvirt.ValidDomainType(c.DomainType); err != nil {
		bad("%v", err)
	}
	errs = append(errs, c.validateCallerIdentity()...)
	errs = append(errs, c.validateAdmin()...)
	errs = append(errs, c.validateFence()...)
	errs = append(errs, c.validateLeader()...)
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("%v", err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("--log-format %q: want json or text", c.LogFormat)
	}
	return errors.Join(errs...)
}

// Effective --caller-identity modes (callerMode).
const (
	callerBigFleet = "bigfleet"
	callerAny      = "any"
	// callerOff: the transport carries no client identity (plaintext or
	// server-only TLS), so there is nothing to check (ADR-0048).
	callerOff = "off"
)

func (c *config) validateCallerIdentity() []error {
	switch c.CallerIdentity {
	case "", callerAny:
	case callerBigFleet:
		if c.TLSCA == "" {
			return []error{errors.New("--caller-identity=bigfleet needs mTLS on --addr: set --tls-cert, --tls-key and --tls-ca (the CA that signs BigFleet's certificates); without a client certificate there is no caller to bind")}
		}
	default:
		return []error{fmt.Errorf("--caller-identity %q: want bigfleet or any", c.CallerIdentity)}
	}
	return nil
}

// callerMode is what --addr enforces: bigfleet by default under mTLS.
func (c *config) callerMode() string {
	switch {
	case c.TLSCA == "":
		return callerOff
	case c.CallerIdentity == callerAny:
		return callerAny
	}
	return callerBigFleet
}
