package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/arbiter"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/caps"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/serial"
)

// Observer is told about every finished transition (for metrics).
type Observer interface {
	TransitionFinished(kind record.OpKind, zone, outcome string, d time.Duration)
}

// Config configures an Engine.
type Config struct {
	// Provider is the HostRef.provider label, stable for a machine's life.
	Provider string
	// Seed is the capacity model's slots. Missing ones are added at startup;
	// existing records are never removed or reset.
	Seed []record.Machine

	CreateTimeout, ConfigureTimeout, DrainTimeout, DeleteTimeout time.Duration
	// MigrateTimeout bounds one live migration (default 10m); at the
	// bound the backend aborts it and the VM stays on its source.
	MigrateTimeout time.Duration
	// MoveGuard, when set, holds the leader's lease for each live
	// migration (server/leader.Quiet under --leader-elect): a migration
	// it refuses is Unavailable, and one it ends is aborted.
	MoveGuard MoveGuard
	// ReconcileInterval: 0 disables the periodic reconcile (the one at
	// startup still runs).
	ReconcileInterval time.Duration
	// ShutdownGrace is how long Close lets in-flight transitions finish
	// before cancelling them (0: cancel at once, as a crash would).
	ShutdownGrace time.Duration
	// CommitRetry bounds how long a transition's outcome commit is retried
	// before it is parked for the sweep (default 1m).
	CommitRetry time.Duration
	// RetryMin is the first pause before a backend call that failed
	// transiently runs again (doubling to 10 s); 0 means 500 ms.
	RetryMin time.Duration
	// SweepInterval is how often the sweep looks for transitional records
	// whose run is gone (default 15s; it also runs with every reconcile).
	SweepInterval time.Duration
	// ReconcileConcurrency bounds how many hosts a reconcile pass lists at
	// once (when the backend streams, backend.ZoneStreamer) and how many
	// lookups and restarts it runs at once after the listings (0:
	// DefaultReconcileConcurrency).
	ReconcileConcurrency int
	// RestartBackoff is the wait before the second restart of an IDLE
	// machine's stopped domain; it doubles on every further try, capped at
	// 32×RestartBackoff (0: DefaultRestartBackoff).
	RestartBackoff time.Duration
	// RestartMaxTries is how many restarts in a row that did not lead to a
	// successful boot reconcile makes before it gives up (0:
	// DefaultRestartMaxTries; counted in the machine's history, so at most
	// HistoryLimit-1). RestartDisabled turns restarts off instead: a
	// stopped domain is only reported (--restart-max-tries 0).
	RestartMaxTries int
	RestartDisabled bool

	Logger   *slog.Logger
	Observer Observer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// UnknownMarkLimit bounds the fence marks kept, in memory only, for
	// machine ids that do not exist (0: DefaultUnknownMarkLimit).
	UnknownMarkLimit int
	// ShardsPerMachine bounds the distinct shards that hold fence marks on
	// one machine (0: DefaultShardsPerMachine).
	ShardsPerMachine int
}

// Engine runs BigFleet's lifecycle rules over a Store and a Backend.
type Engine struct {
	cfg Config
	st  record.Store
	be  backend.Backend
	// can is what be offers beyond backend.Backend, asked once in New.
	can caps.Capabilities
	log *slog.Logger
	// storeID goes into cursors: revisions are numbered per store (and
	// survive restarts with it), so a cursor from another store is foreign.
	storeID uint64

	locks serial.Keyed
	idx   *index.Index

	fences *fence.Keeper     // the marks: checked, kept and restored (marks.go)
	listed *reconcile.Listed // zones listed since start (listing.go)
	views  *arbiter.Views    // each zone's latest listing, for the arbiter
	// rebuilding are the zones whose SPECULATIVE records were seeded
	// without a listing of every host since (a first start, a lost state
	// file): such a record proves nothing about where a domain may be.
	// Durable (Batch.Rebuilding), cleared once a pass covered every host.
	rebuildMu  sync.Mutex
	rebuilding map[string]bool
	rec        *reconcile.Reconciler

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	bgMu     sync.RWMutex // orders bg.Add against Close's bg.Wait
	closed   atomic.Bool
	started  atomic.Bool
	// stopping refuses mutations from the start of a graceful stop, while
	// transitions already running may still finish.
	stopping  atomic.Bool
	stopOnce  sync.Once
	recCtx    context.Context // reconcile and sweep: cancelled as a stop begins
	recCancel context.CancelFunc

	calls  serial.CallGate  // one backend call per machine, even after a timeout
	moves  serial.MoveHolds // machines being migrated (migrate.go)
	runs   serial.RunSet    // live transition runs, by operation id
	parkMu sync.Mutex
	parked map[string]parkedOutcome // by operation id
}

// MoveGuard lets a live migration run only while it holds: Hold returns
// the migration's context, which it may end (with a cause) to abort it.
type MoveGuard interface {
	Hold(ctx context.Context) (context.Context, func(), error)
}

// New loads the store, adds missing seed slots and returns a stopped engine.
func New(cfg Config, st record.Store, be backend.Backend) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, d := range []*time.Duration{&cfg.CreateTimeout, &cfg.ConfigureTimeout, &cfg.DrainTimeout, &cfg.DeleteTimeout, &cfg.MigrateTimeout} {
		if *d <= 0 {
			*d = 10 * time.Minute
		}
	}
	if cfg.CommitRetry <= 0 {
		cfg.CommitRetry = time.Minute
	}
	if cfg.ShardsPerMachine <= 0 {
		cfg.ShardsPerMachine = fence.DefaultShardsPerMachine
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 15 * time.Second
	}
	for i := range cfg.Seed {
		if err := record.ValidateID("seed machine id", cfg.Seed[i].ID); err != nil {
			return nil, fmt.Errorf("capacity model: %v", err)
		}
	}
	ctx := context.Background()
	snap, err := st.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	e := &Engine{cfg: cfg, st: st, be: be, can: caps.Of(be), log: cfg.Logger, storeID: snap.StoreID,
		rebuilding: maps.Clone(snap.Rebuilding), listed: reconcile.NewListed(), views: arbiter.NewViews()}
	e.fences = fence.NewKeeper(snap.Marks, cfg.ShardsPerMachine, cfg.UnknownMarkLimit, fenceMachines{e}, cfg.Logger)
	interner := index.NewMapInterner()
	interner.Machines(snap.Machines)
	e.idx = index.New(snap.Machines)
	e.rec = e.newReconciler()
	if err := e.addSeed(ctx, interner); err != nil {
		return nil, err
	}
	e.cfg.Seed = nil // the slots live in the index now
	e.fences.AdoptUnknown()
	e.bgCtx, e.bgCancel = context.WithCancel(context.Background())
	e.recCtx, e.recCancel = context.WithCancel(e.bgCtx)
	return e, nil
}

// addSeed commits the slots the capacity model has and the store lacks, in
// chunks so a first start with a large fleet stays one write per chunk.
// Only the missing slots are interned: on a restart that is none of them,
// and interning 100k seed slots by content cost ~0.3 s of the boot.
func (e *Engine) addSeed(ctx context.Context, interner *index.MapInterner) error {
	var missing []record.Machine
	if e.rebuilding == nil {
		e.rebuilding = map[string]bool{}
	}
	marked := map[string]bool{} // zones newly rebuilding: marked with the first chunk
	for _, m := range e.cfg.Seed {
		if _, ok := e.idx.Get(m.ID); !ok {
			missing = append(missing, m)
			if !e.rebuilding[m.Zone] {
				marked[m.Zone] = true
			}
		}
	}
	interner.Machines(missing)
	now := e.cfg.Now()
	for len(missing) > 0 {
		n := min(len(missing), 2048)
		chunk := make([]record.Machine, n)
		for i, m := range missing[:n] {
			c := m.Edit()
			c.State = record.Speculative
			c.StateSince = now
			c.Revision = e.idx.Reserve()
			chunk[i] = c
		}
		b := record.Batch{Machines: chunk}
		if len(marked) > 0 {
			b.Rebuilding, marked = marked, nil
		}
		if err := e.st.Commit(ctx, b); err != nil {
			for i := range chunk {
				e.idx.Abandon(chunk[i].Revision)
			}
			return fmt.Errorf("seed state: %w", err)
		}
		for i := range chunk {
			e.idx.Publish(&chunk[i])
		}
		for z := range b.Rebuilding {
			e.rebuilding[z] = true
		}
		missing = missing[n:]
	}
	return nil
}

// Start resumes transitions that were in flight when the process stopped
// and starts the reconcile loop. It returns at once.
func (e *Engine) Start(ctx context.Context) {
	if e.started.Swap(true) {
		return
	}
	for _, id := range e.idx.IDs() {
		m, _ := e.idx.Get(id)
		if m.State.Transitional() {
			e.resume(id)
		}
	}
	e.goBackground(e.reconcileLoop)
}

// Get returns one machine, a deep copy the caller may keep and change.
func (e *Engine) Get(ctx context.Context, id string) (record.Machine, error) {
	m, err := e.GetShared(ctx, id)
	if err != nil {
		return record.Machine{}, err
	}
	return m.Clone(), nil
}

// GetShared returns the published record itself, without copying. Records
// are immutable once published (a change publishes a new one), so it stays
// valid and consistent forever, but it is shared with the engine and every
// other reader: read it, never write to it or its maps. This is the read
// path's API: a Get of a 100k fleet polled by many shards must not copy.
func (e *Engine) GetShared(_ context.Context, id string) (*record.Machine, error) {
	if err := record.ValidateID("id", id); err != nil {
		return nil, err
	}
	m, ok := e.idx.Get(id)
	if !ok {
		return nil, record.Errorf(record.CodeNotFound, "machine %q not found", id)
	}
	return m, nil
}

// List returns machines changed after q.Since (all when the cursor is
// absent or not ours), in revision order, at most q.MaxResults of them.
// The records share the engine's maps, which callers must treat as
// read-only: copying every map of a 100k-machine fleet per List would
// dominate its cost.
func (e *Engine) List(ctx context.Context, q record.ListQuery) (record.ListResult, error) {
	res, err := e.ListShared(ctx, q)
	if err != nil {
		return record.ListResult{}, err
	}
	out := make([]record.Machine, len(res.Machines))
	for i, m := range res.Machines {
		out[i] = *m
		out[i].DetachEncodingCache() // a copy: the caller may change it
	}
	return record.ListResult{Machines: out, Revision: res.Revision}, nil
}

// ListShared is List returning the published records themselves (read
// only, see GetShared): a page costs one slice of pointers.
func (e *Engine) ListShared(_ context.Context, q record.ListQuery) (SharedList, error) {
	if q.MaxResults < 0 {
		return SharedList{}, record.Errorf(record.CodeInvalid, "max_results must not be negative")
	}
	from, _ := index.DecodeCursor(q.Since, e.storeID)
	ms, cursor := e.idx.List(from, q.States, q.MaxResults)
	return SharedList{Machines: ms, Revision: index.EncodeCursor(e.storeID, cursor)}, nil
}

// SharedList is one page of published records (read only) and the cursor
// to continue from.
type SharedList struct {
	Machines []*record.Machine
	Revision []byte
}

// Counts returns the number of machines per state and zone.
func (e *Engine) Counts() map[index.StateZone]int { return e.idx.Counts() }

// Watch subscribes to machine changes. The returned channel gets a copy of
// every record published from now on; cancel unsubscribes and closes it.
// lost reports whether the buffer overflowed and records were dropped.
func (e *Engine) Watch(buffer int) (ch <-chan record.Machine, lost func() bool, cancel func()) {
	return e.idx.Watch(buffer)
}

// Backend returns the substrate (for the admin API's host view).
func (e *Engine) Backend() backend.Backend { return e.be }

func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "op-" + hex.EncodeToString(b[:])
}

// goBackground runs f as tracked background work, unless the engine is
// closing: then f is dropped, which is safe because anything it would have
// carried on is still transitional in the store and resumed by the next
// Start. It reports whether f was started.
func (e *Engine) goBackground(f func()) bool {
	e.bgMu.RLock()
	defer e.bgMu.RUnlock()
	if e.closed.Load() {
		return false
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		f()
	}()
	return true
}
