package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/leader"
)

// The split brain's second line (docs/ha.md): a new leader reads its term
// (the Lease's uid and leaseTransitions) before it acts and hands it to
// the backend, which stamps it on every domain it writes and never
// changes a domain that carries a newer term of the same Lease. A leader
// that finds one has been replaced without knowing it yet: it steps down
// as on a lost Lease (refuses every call, cancels its work, exits).

// takeTerm reads this leader's term, trying within the renew deadline,
// and sets it on the backend. On failure it steps down and reports false:
// a leader that cannot say its term does not act.
func (e *election) takeTerm(ctx context.Context) bool {
	tctx, cancel := context.WithTimeout(ctx, e.cfg.Renew)
	defer cancel()
	var (
		lease string
		n     int64
		err   error
	)
	for {
		if lease, n, err = leader.Term(tctx, e.client, e.cfg); err == nil || tctx.Err() != nil {
			break
		}
		select {
		case <-tctx.Done():
		case <-time.After(e.cfg.Retry):
		}
	}
	if err != nil {
		e.d.log.Error("leader: cannot read this leader's term; stepping down", slog.String("err", err.Error()))
		go e.stepDown(fmt.Errorf("could not read this leader's term within --leader-elect-renew: %w; exiting so Kubernetes restarts this pod as a standby", err))
		return false
	}
	term := backend.LeaderTerm{Lease: lease, N: n}
	if t, ok := e.d.be.(backend.LeaderTermer); ok {
		t.SetLeaderTerm(term, func(found backend.LeaderTerm) { e.newerTerm(term, found) })
	}
	e.d.log.Info("leader: acting under term", slog.Int64("term", n), slog.String("lease_uid", lease))
	return true
}

// newerTerm is the backend's word that a domain carries a newer term of
// this Lease: another replica leads. It steps down in the background
// (the backend call that found it returns ErrNewerTerm at once).
func (e *election) newerTerm(own, found backend.LeaderTerm) {
	e.d.log.Warn("leader: a domain carries a newer leader's term: another replica leads; stepping down",
		slog.Int64("term", own.N), slog.Int64("found_term", found.N))
	go e.stepDown(fmt.Errorf("a domain carries leader term %d of this Lease, newer than this leader's %d: another replica leads; stopped acting; exiting so Kubernetes restarts this pod as a standby",
		found.N, own.N))
}

// stepDown stops acting for cause, as a lost Lease does: every call is
// refused from now on, the work in flight is cancelled, and cause goes
// to waitAndShutdown, which exits non-zero.
func (e *election) stepDown(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gate.Stop()
	if eng := e.d.engPtr.Load(); eng != nil { // nil: stepping down before the takeover built it
		eng.StopAccepting()
	}
	e.abortWork()
	select {
	case e.lost <- cause:
	default: // already on its way out
	}
}

// gateChanges holds back every call that would change a host while this
// leader is quiet (its renewal late: server/leader.Quiet), on a backend
// that can (backend.ChangeGater).
func (d *daemon) gateChanges() {
	if d.election == nil {
		return
	}
	if g, ok := d.be.(backend.ChangeGater); ok {
		g.GateChanges(d.election.cfg.Quiet.MayChange)
	}
}
