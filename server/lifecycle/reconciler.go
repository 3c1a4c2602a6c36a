package lifecycle

import (
	"context"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Reconcile lives in package reconcile; these keep its names in lifecycle.
type (
	// ReconcileReport summarises one reconcile pass.
	ReconcileReport           = reconcile.Report
	DuplicateObserver         = reconcile.DuplicateObserver
	MigrationRecoveryObserver = reconcile.MigrationRecoveryObserver
	RunObserver               = reconcile.RunObserver
	RestartObserver           = reconcile.RestartObserver
	WaitObserver              = reconcile.WaitObserver
)

// Reconcile defaults (Config).
const (
	DefaultReconcileConcurrency = reconcile.DefaultReconcileConcurrency
	DefaultRestartBackoff       = reconcile.DefaultRestartBackoff
	DefaultRestartMaxTries      = reconcile.DefaultRestartMaxTries
)

// newReconciler builds the engine's reconciler, which sees the engine only
// through reconcileView.
func (e *Engine) newReconciler() *reconcile.Reconciler {
	return reconcile.New(reconcileView{e}, reconcile.Config{
		Backend: e.be, Caps: e.can, Listed: e.listed, Views: e.views, Provider: e.cfg.Provider, Logger: e.log, Now: e.cfg.Now,
		ConfigureTimeout: e.cfg.ConfigureTimeout, Observer: e.cfg.Observer, ReconcileConcurrency: e.cfg.ReconcileConcurrency,
		RestartBackoff: e.cfg.RestartBackoff, RestartMaxTries: e.cfg.RestartMaxTries, RestartDisabled: e.cfg.RestartDisabled,
	})
}

// reconcileLoop reconciles at startup and every ReconcileInterval, and
// sweeps after each reconcile and every SweepInterval (the sweep runs even
// when periodic reconcile is off: a record must never stay transitional).
// It stops as soon as a shutdown begins.
func (e *Engine) reconcileLoop() {
	ctx := e.recCtx
	e.Reconcile(ctx)
	var reconcileTick <-chan time.Time
	if e.cfg.ReconcileInterval > 0 {
		t := time.NewTicker(e.cfg.ReconcileInterval)
		defer t.Stop()
		reconcileTick = t.C
	}
	sweep := time.NewTicker(e.cfg.SweepInterval)
	defer sweep.Stop()
	var soon <-chan struct{} // nil, never ready, for backends that never ask
	if rr := e.can.ReconcileRequester; rr != nil {
		soon = rr.ReconcileRequests()
	}
	for ctx.Err() == nil {
		e.Sweep()
		select {
		case <-ctx.Done():
		case <-reconcileTick:
			e.Reconcile(ctx)
		case <-e.listed.Kick():
			e.Reconcile(ctx)
		case <-soon: // a late result the backend cannot judge itself
			e.Reconcile(ctx)
		case <-sweep.C:
		}
	}
}

// Reconcile runs one reconcile pass (see reconcile.Reconciler.Pass).
func (e *Engine) Reconcile(ctx context.Context) ReconcileReport {
	rep := e.rec.Pass(ctx)
	e.confirmRebuilt(ctx)
	return rep
}

// LastReconcile returns the report of the most recent reconcile pass.
func (e *Engine) LastReconcile() ReconcileReport { return e.rec.Last() }

// reconcileView is the engine as package reconcile sees it
// (reconcile.Engine): seven methods, nothing else of the engine.
type reconcileView struct{ e *Engine }

func (v reconcileView) Get(id string) (*record.Machine, bool) { return v.e.idx.Get(id) }

func (v reconcileView) IDs() []string { return v.e.idx.IDs() }

func (v reconcileView) Update(id string, expect record.Expect, edit record.Edit) (*record.Machine, error) {
	return v.e.update(id, expect, edit)
}

func (v reconcileView) EnterCall(ctx context.Context, id string, kind record.OpKind) (func(), record.OpKind, error) {
	return v.e.calls.Enter(ctx, id, kind)
}

func (v reconcileView) Migrating(id string, listedAt time.Time) bool {
	return v.e.moves.Skip(id, listedAt)
}

func (v reconcileView) ResumeConfigure(m *record.Machine) {
	op := m.Edit()
	v.e.log.Warn("asking the guest what became of a Configure found cut on its domain", "machine", op.ID, "op", op.OperationID)
	v.e.track(op.OperationID, func() { v.e.resumeConfigure(op) })
}

func (v reconcileView) RestoreMarks(ctx context.Context, zi backend.ZoneInventory) int {
	return v.e.fences.Restore(ctx, zi)
}
