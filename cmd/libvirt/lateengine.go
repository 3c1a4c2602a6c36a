package main

import (
	"context"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// lateEngine stands for the engine in the handlers a standby serves
// before it leads. Under --leader-elect the engine is built only at
// takeover (takeover.go), from the shared journal: what it holds must be
// in the store when the engine loads it. Until then every call is
// Unavailable; the gate refuses them first anyway.
type lateEngine struct {
	p  *atomic.Pointer[lifecycle.Engine]
	be backend.Backend
}

var (
	_ server.Engine = lateEngine{}
	_ admin.Engine  = lateEngine{}
)

var errNoEngine = &record.Error{Code: record.CodeUnavailable, Msg: "standby: not the leader; retry"}

func (l lateEngine) get() (*lifecycle.Engine, error) {
	if e := l.p.Load(); e != nil {
		return e, nil
	}
	return nil, errNoEngine
}

func (l lateEngine) Create(ctx context.Context, r record.CreateRequest) (record.Ack, error) {
	return call(l, func(e *lifecycle.Engine) (record.Ack, error) { return e.Create(ctx, r) })
}

func (l lateEngine) Configure(ctx context.Context, r record.ConfigureRequest) (record.Ack, error) {
	return call(l, func(e *lifecycle.Engine) (record.Ack, error) { return e.Configure(ctx, r) })
}

func (l lateEngine) Drain(ctx context.Context, r record.DrainRequest) (record.Ack, error) {
	return call(l, func(e *lifecycle.Engine) (record.Ack, error) { return e.Drain(ctx, r) })
}

func (l lateEngine) Delete(ctx context.Context, r record.DeleteRequest) (record.Ack, error) {
	return call(l, func(e *lifecycle.Engine) (record.Ack, error) { return e.Delete(ctx, r) })
}

func (l lateEngine) GetShared(ctx context.Context, id string) (*record.Machine, error) {
	return call(l, func(e *lifecycle.Engine) (*record.Machine, error) { return e.GetShared(ctx, id) })
}

func (l lateEngine) ListShared(ctx context.Context, q record.ListQuery) (lifecycle.SharedList, error) {
	return call(l, func(e *lifecycle.Engine) (lifecycle.SharedList, error) { return e.ListShared(ctx, q) })
}

func (l lateEngine) Get(ctx context.Context, id string) (record.Machine, error) {
	return call(l, func(e *lifecycle.Engine) (record.Machine, error) { return e.Get(ctx, id) })
}

func (l lateEngine) List(ctx context.Context, q record.ListQuery) (record.ListResult, error) {
	return call(l, func(e *lifecycle.Engine) (record.ListResult, error) { return e.List(ctx, q) })
}

func (l lateEngine) Release(ctx context.Context, id string) (record.Ack, error) {
	return call(l, func(e *lifecycle.Engine) (record.Ack, error) { return e.Release(ctx, id) })
}

func (l lateEngine) Migrate(ctx context.Context, id, toHost string) (lifecycle.MigrateResult, error) {
	return call(l, func(e *lifecycle.Engine) (lifecycle.MigrateResult, error) { return e.Migrate(ctx, id, toHost) })
}

func (l lateEngine) ClearMark(ctx context.Context, id, shard, by string) (lifecycle.ClearedMark, error) {
	return call(l, func(e *lifecycle.Engine) (lifecycle.ClearedMark, error) { return e.ClearMark(ctx, id, shard, by) })
}

// call runs f on the engine, or answers Unavailable before there is one.
func call[T any](l lateEngine, f func(*lifecycle.Engine) (T, error)) (T, error) {
	e, err := l.get()
	if err != nil {
		var zero T
		return zero, err
	}
	return f(e)
}

// The reads without an error answer empty before there is an engine.

func (l lateEngine) Counts() map[index.StateZone]int {
	if e := l.p.Load(); e != nil {
		return e.Counts()
	}
	return nil
}

func (l lateEngine) Marks() map[record.MarkKey]record.Mark {
	if e := l.p.Load(); e != nil {
		return e.Marks()
	}
	return nil
}

func (l lateEngine) ShardLimit() (int, int64) {
	if e := l.p.Load(); e != nil {
		return e.ShardLimit()
	}
	return fence.DefaultShardsPerMachine, 0
}

func (l lateEngine) BusiestMachines(n int, keep func(string) bool) []fence.ShardCount {
	if e := l.p.Load(); e != nil {
		return e.BusiestMachines(n, keep)
	}
	return nil
}

func (l lateEngine) LastReconcile() lifecycle.ReconcileReport {
	if e := l.p.Load(); e != nil {
		return e.LastReconcile()
	}
	return lifecycle.ReconcileReport{}
}

func (l lateEngine) Reconcile(ctx context.Context) lifecycle.ReconcileReport {
	if e := l.p.Load(); e != nil {
		return e.Reconcile(ctx)
	}
	return lifecycle.ReconcileReport{}
}

// Watch before there is an engine is a closed channel: the stream ends
// and the client reconnects (to the leader, through the Service).
func (l lateEngine) Watch(buffer int) (<-chan record.Machine, func() bool, func()) {
	if e := l.p.Load(); e != nil {
		return e.Watch(buffer)
	}
	ch := make(chan record.Machine)
	close(ch)
	return ch, func() bool { return false }, func() {}
}

func (l lateEngine) Backend() backend.Backend { return l.be }
