package guest

import (
	"log/slog"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/agentcmd"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
)

// Target is a machine's domain as the backend located it: the host that
// holds it, the domain's name and the machine it is.
type Target struct {
	Host      *hostconn.Host
	Zone      string // for the log
	Domain    string
	MachineID string
}

// Config is what the guest operations need of the backend's configuration.
type Config struct {
	Provider     string // whose domains these are (meta.ReadOwned)
	AgentTimeout time.Duration
	Bootstrap    guestagent.BootstrapConfig
	Booted       guestagent.BootedConfig
	WaitBooted   bool          // --wait-booted: IDLE means booted
	BootTimeout  time.Duration // bounds the check of a guest started again (WatchBoot)
	Log          *slog.Logger
}

// Guests runs the operations on the backend's guests and keeps the runtime
// view of their boots.
type Guests struct {
	cfg   Config
	boots *boots

	// StoppedEvery is how often a boot wait looks whether the domain
	// still runs (AwaitBootedRunning); tests shorten it.
	StoppedEvery time.Duration
	// Transport replaces the libvirt agent transport in tests (the test
	// driver has no guest agent).
	Transport func(t Target) guestagent.Transport
}

// New returns the guest operations under cfg.
func New(cfg Config) *Guests {
	return &Guests{cfg: cfg, boots: newBoots(), StoppedEvery: 2 * time.Second}
}

// Client talks to the domain's guest agent over libvirt (or the tests'
// transport), each command bounded by --agent-timeout.
func (g *Guests) Client(t Target) *guestagent.Client {
	var tr guestagent.Transport = agentcmd.Transport{Host: t.Host, Domain: t.Domain}
	if g.Transport != nil {
		tr = g.Transport(t)
	}
	return guestagent.NewClient(tr, guestagent.WithTimeout(g.cfg.AgentTimeout))
}

func (g *Guests) bootstrapper(t Target) *guestagent.Bootstrapper {
	c := g.Client(t)
	cfg := g.cfg.Bootstrap
	if cfg.OnEscalate == nil {
		cfg.OnEscalate = func(cluster string, cause error) {
			g.cfg.Log.Warn("graceful drain gave up; forcing", "domain", t.Domain, "cluster", cluster, "why", cause)
		}
	}
	return guestagent.NewBootstrapper(c, cfg)
}

// StopWatch ends the background check of machineID's boot, if one runs
// (a wait of its own follows).
func (g *Guests) StopWatch(machineID string) { g.boots.stopWatch(machineID) }

// Forget ends machineID's background check and drops its boot status:
// the machine is being deleted. A nil Guests has nothing to forget.
func (g *Guests) Forget(machineID string) {
	if g != nil {
		g.boots.forget(machineID)
	}
}

// Close stops every background check and waits for them.
func (g *Guests) Close() {
	if g != nil {
		g.boots.close()
	}
}
