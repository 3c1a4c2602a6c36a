package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// MigrateResult is a finished live migration.
type MigrateResult struct {
	Machine  record.Machine // as recorded after the migration
	From, To string         // host names
	Why      string         // the destination's placement decision
	Took     time.Duration
}

// Migrate moves an IDLE or CONFIGURED machine's running VM to another host
// of its zone (toHost, or the one the zone's placement picks) and waits
// for it. It is an operator's write (admin API), not a BigFleet
// transition: state, cluster, shard metadata, operation id and fence
// marks stay as they are, and BigFleet sees only HostRef.ref change.
// While it runs the machine is held (see moveHolds). A failure never
// makes the machine FAILED: the VM keeps running on its source, and the
// cause goes to last_error, the history and a WARN line. Under a
// MoveGuard (a leader's lease) it starts only while the guard holds, and
// is aborted when the guard lets go.
func (e *Engine) Migrate(ctx context.Context, id, toHost string) (MigrateResult, error) {
	if err := record.ValidateID("id", id); err != nil {
		return MigrateResult{}, err
	}
	mg := e.can.Migrator
	if mg == nil {
		return MigrateResult{}, record.Errorf(record.CodeUnimplemented, "this backend cannot migrate machines")
	}
	mctx, cancel := context.WithTimeout(e.bgCtx, e.cfg.MigrateTimeout) // not the caller's: a dropped client must not cut it
	defer cancel()
	if g := e.cfg.MoveGuard; g != nil {
		gctx, release, err := g.Hold(mctx)
		if err != nil {
			e.log.Warn("live migration refused", "machine", id, "err", err)
			return MigrateResult{}, record.Errorf(record.CodeUnavailable, "migrate machine %q: %v", id, err)
		}
		defer release()
		mctx = gctx
	}
	cur, err := e.holdForMigration(id, toHost)
	if err != nil {
		return MigrateResult{}, err
	}
	runKey := "\x00migrate " + id
	defer e.runs.Done(runKey) // registered by holdForMigration: a graceful stop waits for it
	defer func() { e.moves.End(id, e.cfg.Now()) }()
	started := e.cfg.Now()
	pl, merr := e.migrateCall(mctx, mg, cur, toHost)
	switch cause := context.Cause(mctx); {
	case merr == nil || cause == nil:
	case mctx.Err() == context.DeadlineExceeded:
		merr = fmt.Errorf("timed out after %s: %w", roundBudget(e.cfg.MigrateTimeout), merr)
	case !strings.Contains(merr.Error(), cause.Error()): // the guard's why (a late lease renewal)
		merr = fmt.Errorf("%w (aborted: %v)", merr, cause)
	}
	return e.recordMigration(id, cur, pl, merr, started)
}

// holdForMigration checks, under the machine's lock, that it may migrate
// and holds it. The caller releases the hold and the run.
func (e *Engine) holdForMigration(id, toHost string) (*record.Machine, error) {
	unlock := e.locks.Lock(id)
	defer unlock()
	cur, ok := e.idx.Get(id)
	switch {
	case !ok:
		return nil, record.Errorf(record.CodeNotFound, "machine %q not found", id)
	case cur.State != record.Idle && cur.State != record.Configured:
		return nil, record.Errorf(record.CodeAborted, "cannot migrate machine %q: it is %s, only IDLE or CONFIGURED machines can be migrated", id, cur.State)
	case toHost != "" && toHost == cur.HostName:
		return nil, record.Errorf(record.CodeInvalid, "machine %q is already on host %q", id, toHost)
	}
	if err := e.placementReady(cur); err != nil {
		return nil, err
	}
	e.bgMu.RLock()
	defer e.bgMu.RUnlock()
	if e.stopping.Load() {
		return nil, record.Errorf(record.CodeUnavailable, "provider is shutting down; retry against the next instance")
	}
	if !e.moves.Take(id, toHost, e.cfg.Now()) {
		return nil, record.Errorf(record.CodeAborted, "machine %q is already being migrated", id)
	}
	e.runs.Add("\x00migrate " + id)
	return cur, nil
}

// placementReady refuses (Unavailable) a machine whose own host is down.
func (e *Engine) placementReady(m *record.Machine) *record.Error {
	if pr := e.can.PlacementReadiness; pr != nil {
		if err := pr.PlacementReady(m.Placement()); err != nil {
			return record.Errorf(record.CodeUnavailable, "host of machine %q is not available: %v", m.ID, err)
		}
	}
	return nil
}

// migrateCall runs the backend's migration through the machine's call
// gate, so it never overlaps a reconcile restart or a late call.
func (e *Engine) migrateCall(ctx context.Context, mg backend.Migrator, m *record.Machine, toHost string) (backend.Placement, error) {
	leave, running, err := e.calls.Enter(ctx, m.ID, record.OpMigrate)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("the machine's %s call did not return: %w", running, err)
	}
	defer leave()
	return mg.Migrate(ctx, backend.MigrateSpec{MachineID: m.ID, Placement: m.Placement(),
		VCPU: m.VCPU, MemoryMiB: m.MemoryMiB, ToHost: toHost})
}

// migrateErrPrefix starts the last_error of a failed migration (cleared
// by the next one that succeeds).
const migrateErrPrefix = "migrate failed: "

// recordMigration commits the outcome: the new host on success, the cause
// on failure; history either way. The state never changes.
func (e *Engine) recordMigration(id string, was *record.Machine, pl backend.Placement, merr error, started time.Time) (MigrateResult, error) {
	if refused(merr) {
		// The destination was refused before any work: the request was
		// wrong, the machine saw nothing, so its record stays as it is.
		e.log.Warn("migration refused; the machine stays on its host", "machine", id, "from", was.HostName,
			"to", e.moveTarget(id), "err", merr)
		return MigrateResult{}, migrateError(id, merr)
	}
	// The move hold refuses every transition while the migration runs, so
	// the record is still the operation it was held on (was).
	now := e.cfg.Now()
	res := MigrateResult{From: was.HostName, To: pl.Host, Why: pl.Why, Took: now.Sub(started)}
	n, cerr := e.update(id, record.Expect{OperationID: was.OperationID}, func(c, n *record.Machine) error {
		h := record.Transition{OperationID: c.OperationID, Kind: record.OpMigrate, From: c.State, To: c.State,
			Started: started, Ended: now, Outcome: "succeeded"}
		if merr == nil {
			n.HostName, n.Domain = pl.Host, pl.Domain
			n.Host = record.HostRef{Provider: e.cfg.Provider, Ref: pl.Ref()}
			if strings.HasPrefix(n.LastError, migrateErrPrefix) {
				n.LastError = ""
			}
			h.Note = fmt.Sprintf("from host %s to host %s in %s (%s)", was.HostName, pl.Host, res.Took.Round(time.Millisecond), pl.Why)
		} else {
			h.Outcome = "failed"
			n.LastError = migrateErrPrefix + merr.Error() + "; the VM still runs on host " + was.HostName
			h.LastError = n.LastError
		}
		n.History = record.AppendHistory(n.History, h)
		return nil
	})
	if _, ok := e.idx.Get(id); !ok && errors.Is(cerr, errStale) {
		return MigrateResult{}, record.Errorf(record.CodeNotFound, "machine %q not found", id)
	}
	attrs := []any{"machine", id, "zone", was.Zone, "from", was.HostName, "state", was.State.String(),
		"took", res.Took.Round(time.Millisecond).String()}
	switch {
	case merr != nil:
		e.log.Warn("migration failed; the machine stays on its host", append(attrs, "to", e.moveTarget(id), "err", merr)...)
		return MigrateResult{}, migrateError(id, merr)
	case cerr != nil:
		// The VM moved but the record says where it was: reconcile finds it
		// running on its new host and records that (see reconcileOne).
		e.log.Error("migration done but not recorded; reconcile will record the new host", append(attrs, "to", pl.Host, "err", cerr)...)
		return MigrateResult{}, cerr
	}
	e.log.Info("machine migrated", append(attrs, "to", pl.Host, "placement", pl.Why)...)
	res.Machine = n.Clone()
	return res, nil
}

func refused(err error) bool {
	return errors.Is(err, backend.ErrUnknownHost) || errors.Is(err, backend.ErrNoCapacity)
}

func (e *Engine) moveTarget(id string) string { return e.moves.Target(id) }

// migrateError classifies a failed migration for the caller: a refused
// destination is the request's fault (no room, no such host), anything
// else is the hosts' (Unavailable: the machine is fine, retry later).
func migrateError(id string, err error) *record.Error {
	msg := fmt.Sprintf("migrate machine %q: %v", id, err)
	switch {
	case errors.Is(err, backend.ErrUnknownHost):
		return record.Errorf(record.CodeNotFound, "%s", msg)
	case errors.Is(err, backend.ErrNoCapacity):
		return record.Errorf(record.CodeAborted, "%s", msg)
	case errors.Is(err, backend.ErrNotRunning):
		return record.Errorf(record.CodeAborted, "%s (a live migration needs a running VM)", msg)
	}
	return record.Errorf(record.CodeUnavailable, "%s", msg)
}
