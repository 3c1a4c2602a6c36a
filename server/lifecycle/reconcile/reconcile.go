package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/arbiter"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/caps"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Engine is what reconcile needs of the lifecycle engine: its records,
// the one way to change one, the machine's backend call gate, the
// migration holds and the fence marks. Nothing else of the engine is
// reachable from here.
type Engine interface {
	// Get returns the published record of id (read only).
	Get(id string) (*record.Machine, bool)
	// IDs returns every machine id.
	IDs() []string
	// Update changes one record if it is still the one expected: the
	// engine's single way to change a record outside its accept path.
	Update(id string, expect record.Expect, edit record.Edit) (*record.Machine, error)
	// EnterCall waits, under ctx, for the machine's backend call gate; see
	// the engine's callGate. leave must be called once the call returned.
	EnterCall(ctx context.Context, id string, kind record.OpKind) (leave func(), running record.OpKind, err error)
	// Migrating reports whether a live migration holds id, or ended after
	// the hosts were listed at listedAt: reconcile passes it by.
	Migrating(id string, listedAt time.Time) bool
	// RestoreMarks raises the fence marks to those one zone's hosts
	// recorded (before anything of the zone is adopted) and returns how
	// many it raised.
	RestoreMarks(ctx context.Context, zi backend.ZoneInventory) int
	// ResumeConfigure ends the cut Configure of the CONFIGURING record m,
	// just taken over from its domain (configure.go), as its guest tells,
	// in the background.
	ResumeConfigure(m *record.Machine)
}

// Config configures a Reconciler; the fields named as in the engine's
// Config mean the same.
type Config struct {
	Backend backend.Backend
	Caps    caps.Capabilities // Backend's optional features
	Listed  *Listed           // the zones listed since start, shared with the engine's accept path
	// Views receives each zone's view of its listing, for the arbiter's
	// decisions outside a pass (nil: a private set).
	Views    *arbiter.Views
	Provider string
	Logger   *slog.Logger
	Now      func() time.Time
	// Observer is the engine's Observer; reconcile tells it what it did
	// when it implements DuplicateObserver, MigrationRecoveryObserver,
	// RunObserver or RestartObserver.
	Observer any

	// ConfigureTimeout is the deadline a Configure taken over from a
	// domain gets (its resume has the same bound).
	ConfigureTimeout time.Duration

	ReconcileConcurrency int
	RestartBackoff       time.Duration
	RestartMaxTries      int
	RestartDisabled      bool
}

// Reconciler runs reconcile passes for one engine.
type Reconciler struct {
	eng    Engine
	cfg    Config
	be     backend.Backend
	can    caps.Capabilities
	log    *slog.Logger
	listed *Listed
	views  *arbiter.Views

	// The optional observers, asked once.
	dupObs     DuplicateObserver
	recObs     MigrationRecoveryObserver
	runObs     RunObserver
	restartObs RestartObserver
	waitObs    WaitObserver

	repMu   sync.Mutex
	lastRep Report
}

// New returns the reconciler of eng.
func New(eng Engine, cfg Config) *Reconciler {
	r := &Reconciler{eng: eng, cfg: cfg, be: cfg.Backend, can: cfg.Caps, log: cfg.Logger, listed: cfg.Listed, views: cfg.Views}
	if r.views == nil {
		r.views = arbiter.NewViews()
	}
	r.dupObs, _ = cfg.Observer.(DuplicateObserver)
	r.recObs, _ = cfg.Observer.(MigrationRecoveryObserver)
	r.runObs, _ = cfg.Observer.(RunObserver)
	r.restartObs, _ = cfg.Observer.(RestartObserver)
	r.waitObs, _ = cfg.Observer.(WaitObserver)
	return r
}

// Report summarises one reconcile pass (for logs and the admin API).
type Report struct {
	At       time.Time
	Adopted  int
	Vanished int
	// Restarted counts IDLE machines whose stopped domain was started
	// again; NotRunning the IDLE or CONFIGURED ones whose domain is still
	// not running after the pass (each named in its last_error).
	Restarted  int
	NotRunning int
	Zones      map[string]string // zone → "" (ok) or the error that stopped it
	// Waiting names the decisions deferred because hosts of their zone
	// were not listed (waiting.go), one line each.
	Waiting []string
}

// Pass compares what the hosts hold with the records. Our own domains
// under SPECULATIVE records are adopted (a lost state file is rebuilt from
// libvirt), a VM that vanished under an IDLE or CONFIGURED record turns it
// FAILED, domains that are not ours are never seen here (the backend only
// lists its own), and records change (so the revision moves) only on a real
// difference. A host whose listing failed is skipped, never read as empty.
// A domain of ours that is not running is handled by checkRun: an IDLE
// machine's is started again (with backoff), any other is reported, never
// FAILED. Each zone is judged and marked listed as soon as its listing
// arrives; lookups and restarts run after the listings (pass.go).
func (r *Reconciler) Pass(ctx context.Context) Report {
	p := r.newPass()
	p.list(ctx)
	p.runQueued(ctx)
	r.observeNotRunning(p.down)
	r.listed.Passed()
	rep := p.rep
	r.setLastReconcile(rep)
	if rep.Adopted+rep.Vanished+rep.Restarted > 0 {
		r.log.Info("reconcile changed machines", "adopted", rep.Adopted, "vanished", rep.Vanished, "restarted", rep.Restarted)
	}
	return rep
}

func (r *Reconciler) reconcileOne(id string, o backend.Observed, found bool, listedAt time.Time, v *arbiter.View) string {
	// A record that changed after the hosts were listed is judged next time:
	// the listing may predate a Create or Delete that just finished.
	unchanged := record.Expect{Holds: func(cur *record.Machine) bool { return cur.StateSince.Before(listedAt) }}
	var what string
	n, err := r.eng.Update(id, unchanged, func(cur, n *record.Machine) error {
		now := r.cfg.Now()
		adopt := arbiter.Adopt(cur, o)
		switch {
		case cur.State == record.Speculative && found && (deleted(cur) || o.DeleteOperationID != ""):
			what = "leftover"
			return record.ErrUnchanged // removed by p.leftover (or its Delete resumed), never adopted
		case cur.State == record.Speculative && found && adopt.Kind != arbiter.Act:
			what = "adoption refuse: " + adopt.Why
			return record.ErrUnchanged
		case cur.State == record.Speculative && found && r.resumesConfigure(o):
			what = OutcomeConfigureResumed
			r.takeOverConfigure(cur, n, o, now)
		case cur.State == record.Speculative && found:
			what = "adopted"
			n.State = record.Idle
			n.Domain, n.HostName = o.Placement.Domain, o.Placement.Host
			n.Host = record.HostRef{Provider: r.cfg.Provider, Ref: o.Placement.Ref()}
			if o.OperationID != "" {
				n.OperationID = o.OperationID
			}
			n.OpKind = record.OpReconcile
			if o.ClusterID != "" {
				n.State = record.Configured
				n.Cluster = o.ClusterID
				n.ShardMetadata = record.CloneMap(o.ShardMetadata)
			}
			n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
				From: cur.State, To: n.State, Started: now, Ended: now, Outcome: "adopted"})
		case (cur.State == record.Idle || cur.State == record.Configured) && found && o.DeleteOperationID != "":
			what = "delete_begun"
			failDeleteBegun(cur, n, o, now)
		case (cur.State == record.Idle || cur.State == record.Configured) && found && relocated(cur, o):
			if vd := arbiter.Relocate(cur, v, o); vd.Kind != arbiter.Act {
				what = "relocation " + vd.Kind.String() + ": " + vd.Why
				return record.ErrUnchanged
			}
			what = "relocated"
			n.HostName = o.Placement.Host
			n.Host = record.HostRef{Provider: r.cfg.Provider, Ref: o.Placement.Ref()}
			n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
				From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: "relocated",
				Note: fmt.Sprintf("domain %s found running on host %s, not %s: a migration the provider did not record (cut by a restart?)",
					cur.Domain, o.Placement.Host, cur.HostName)})
		case (cur.State == record.Idle || cur.State == record.Configured) && !found:
			what = "vanished"
			n.State = record.Failed
			n.LastError = fmt.Sprintf("VM %q vanished from host %q: found missing by reconcile", cur.Domain, cur.Zone)
			if g := arbiter.Gone(cur, v); g.Kind == arbiter.Act {
				n.LastError = g.Why // its only copy was on a host declared down
			}
			n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
				From: cur.State, To: record.Failed, Started: now, Ended: now, Outcome: "failed", LastError: n.LastError})
		default:
			return record.ErrUnchanged
		}
		if what != "relocated" {
			n.StateSince = now
		}
		return nil
	})
	if err != nil {
		if what == "leftover" || strings.HasPrefix(what, "relocation ") || strings.HasPrefix(what, "adoption ") {
			return what
		}
		return ""
	}
	if what == OutcomeConfigureResumed {
		r.eng.ResumeConfigure(n)
	}
	attrs := []any{"machine", id, "change", what, "state", n.State.String()}
	if n.LastError != "" {
		attrs = append(attrs, "err", n.LastError)
	}
	r.log.Warn("reconcile", attrs...)
	return what
}

// deleted reports whether a SPECULATIVE record is one a Delete (or an
// admin Release) returned to its slot (not a seed, nor a record rebuilt
// after a lost state file, until a Delete found begun on its domain was
// resumed; see resumeDelete):
// a domain of it found later is a copy the Delete did not reach (a
// duplicate on another host), and adopting it would bring back a machine
// BigFleet saw deleted.
func deleted(cur *record.Machine) bool {
	return cur.State == record.Speculative && (cur.OpKind == record.OpDelete || cur.OpKind == record.OpRelease)
}

// failDeleteBegun makes FAILED an IDLE or CONFIGURED record whose domain
// carries a Delete's intent: a Delete it does not know of was accepted for
// the machine (the state was restored from a backup older than the host),
// so the domain is half deleted or about to be, and BigFleet has been
// told it is going. It is never started nor handed out again; a Release
// finishes the Delete.
func failDeleteBegun(cur, n *record.Machine, o backend.Observed, now time.Time) {
	n.State = record.Failed
	n.LastError = fmt.Sprintf("domain %s on host %s carries the intent of Delete %s, which this record (operation %s) does not know: "+
		"the state is older than the host; the domain is not started, Release it to finish the Delete",
		o.Placement.Domain, o.Placement.Host, o.DeleteOperationID, cur.OperationID)
	n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpReconcile,
		From: cur.State, To: record.Failed, Started: now, Ended: now, Outcome: "failed", LastError: n.LastError})
}

// relocated reports whether the machine's domain runs on another host of
// its zone than its record says: a migration that finished in libvirt but
// was never recorded (the provider stopped before it could).
func relocated(cur *record.Machine, o backend.Observed) bool {
	return cur.HostName != "" && o.Placement.Host != "" && o.Placement.Host != cur.HostName &&
		o.Placement.Domain == cur.Domain && o.Run.Up()
}

// needsConfirm reports whether a machine missing from a complete listing
// needs ConfirmGone before it may vanish. Only an IDLE or CONFIGURED record
// unchanged since the listing can vanish, and then only if a backend that
// can check (backend.Confirmer) confirms its VM is gone. Backends without
// the check are trusted on their listing alone.
func (r *Reconciler) needsConfirm(m *record.Machine, listedAt time.Time) bool {
	return r.can.Confirmer != nil && (m.State == record.Idle || m.State == record.Configured) && m.StateSince.Before(listedAt)
}

// keepMissing reports whether a machine missing from a complete listing
// must be kept anyway: an error (returned too), or a VM the listing missed
// but a direct lookup found, keeps it.
func (r *Reconciler) keepMissing(ctx context.Context, m *record.Machine, listedAt time.Time) (bool, error) {
	if !r.needsConfirm(m, listedAt) {
		return false, nil
	}
	gone, err := r.can.Confirmer.ConfirmGone(ctx, m.ID, m.Placement())
	switch {
	case err != nil:
		r.log.Warn("reconcile: VM missing from the listing, its absence not confirmed; machine kept", "machine", m.ID, "err", err)
	case !gone:
		r.log.Warn("reconcile: VM missing from the listing but found by a direct lookup; machine kept", "machine", m.ID, "domain", m.Domain)
	}
	return !gone || err != nil, err
}

func (r *Reconciler) setLastReconcile(rep Report) {
	r.repMu.Lock()
	r.lastRep = rep
	r.repMu.Unlock()
}

// Last returns the report of the most recent reconcile pass.
func (r *Reconciler) Last() Report {
	r.repMu.Lock()
	defer r.repMu.Unlock()
	return r.lastRep
}
