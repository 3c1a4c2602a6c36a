package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// decision is what a mutation decided about a machine: either an idempotent
// retry (opID set, next nil), a new transition (next set), or a refusal.
type decision struct {
	opID string
	next *record.Machine
	err  *record.Error
}

func retry(m *record.Machine) decision { return decision{opID: m.OperationID} }

func refuse(code record.Code, format string, args ...any) decision {
	return decision{err: record.Errorf(code, format, args...)}
}

func outOfPosition(m *record.Machine, verb string) decision {
	return refuse(record.CodeAborted, "cannot %s machine %q: it is %s", verb, m.ID, m.State)
}

func failedMachine(m *record.Machine, verb string) decision {
	return refuse(record.CodeAborted, "cannot %s machine %q: it is FAILED (%s)", verb, m.ID, m.LastError)
}

// Create starts SPECULATIVE → CREATING → IDLE.
func (e *Engine) Create(ctx context.Context, r record.CreateRequest) (record.Ack, error) {
	return e.mutate(ctx, r.MachineID, r.Token, nil, func(m *record.Machine) decision {
		switch {
		case m.State == record.Failed:
			return failedMachine(m, "create")
		case m.State == record.Creating, m.State == record.Idle:
			return retry(m)
		case m.State != record.Speculative:
			return outOfPosition(m, "create")
		}
		return e.begin(m, record.OpCreate, record.Creating, e.cfg.CreateTimeout, func(n *record.Machine) {
			n.Cluster, n.ShardMetadata, n.Host, n.Domain = "", nil, record.HostRef{}, ""
		})
	})
}

// Configure starts IDLE → CONFIGURING → CONFIGURED. The blob travels to the
// backend with the transition and is never stored.
func (e *Engine) Configure(ctx context.Context, r record.ConfigureRequest) (record.Ack, error) {
	var blob []byte
	d, err := e.mutateWith(ctx, r.MachineID, r.Token, record.ValidateConfigure(r), func(m *record.Machine) decision {
		switch {
		case m.State == record.Failed:
			return failedMachine(m, "configure")
		case m.State == record.Configuring || m.State == record.Configured:
			if m.Cluster != r.ClusterID {
				return refuse(record.CodeAborted, "machine %q is %s for cluster %q, not %q", m.ID, m.State, m.Cluster, r.ClusterID)
			}
			return retry(m)
		case m.State != record.Idle:
			return outOfPosition(m, "configure")
		}
		blob = r.BootstrapBlob
		return e.begin(m, record.OpConfigure, record.Configuring, e.cfg.ConfigureTimeout, func(n *record.Machine) {
			n.Cluster = r.ClusterID
			n.ShardMetadata = record.CloneMap(r.ShardMetadata)
		})
	}, func(m *record.Machine) { e.launch(m, blob) })
	return d, err
}

// Drain starts CONFIGURED → DRAINING → IDLE.
func (e *Engine) Drain(ctx context.Context, r record.DrainRequest) (record.Ack, error) {
	var invalid *record.Error
	if r.GraceSeconds < 0 {
		invalid = record.Errorf(record.CodeInvalid, "grace_period_seconds must not be negative (got %d)", r.GraceSeconds)
	}
	return e.mutate(ctx, r.MachineID, r.Token, invalid, func(m *record.Machine) decision {
		switch {
		case m.State == record.Failed:
			return failedMachine(m, "drain")
		case m.State == record.Draining, m.State == record.Idle && m.OpKind == record.OpDrain:
			return retry(m)
		case m.State != record.Configured:
			return outOfPosition(m, "drain")
		}
		grace := r.GraceSeconds
		timeout := e.cfg.DrainTimeout
		// A long grace period must not be cut short by the drain timeout.
		if g := time.Duration(min(grace, int64(maxGraceSeconds))) * time.Second; g+time.Minute > timeout {
			timeout = g + time.Minute
		}
		return e.begin(m, record.OpDrain, record.Draining, timeout, func(n *record.Machine) { n.DrainGrace = grace })
	})
}

const maxGraceSeconds = 7 * 24 * 3600

// Delete starts IDLE → DELETING → SPECULATIVE.
func (e *Engine) Delete(ctx context.Context, r record.DeleteRequest) (record.Ack, error) {
	return e.mutate(ctx, r.MachineID, r.Token, nil, func(m *record.Machine) decision {
		switch {
		case m.CapacityType == record.CapacityBareMetal:
			return refuse(record.CodeUnimplemented, "machine %q is bare metal capacity, which has no Delete", m.ID)
		case m.State == record.Failed:
			return failedMachine(m, "delete")
		case m.State == record.Deleting, m.State == record.Speculative && m.OpKind == record.OpDelete:
			return retry(m)
		case m.State != record.Idle:
			return outOfPosition(m, "delete")
		}
		return e.begin(m, record.OpDelete, record.Deleting, e.cfg.DeleteTimeout, nil)
	})
}

// begin builds the record of a new transition: a fresh operation id that is
// never reused, the deadline, and a history entry.
func (e *Engine) begin(m *record.Machine, kind record.OpKind, through record.State, timeout time.Duration, edit func(*record.Machine)) decision {
	now := e.cfg.Now()
	n := m.Edit()
	n.State = through
	n.OperationID = newOperationID()
	n.OpKind = kind
	n.OpDeadline = now.Add(timeout)
	n.LastError = ""
	n.StateSince = now
	if edit != nil {
		edit(&n)
	}
	n.History = record.AppendHistory(n.History, record.Transition{
		OperationID: n.OperationID, Kind: kind, From: m.State, To: through, Started: now, Outcome: "running",
	})
	return decision{opID: n.OperationID, next: &n}
}

func (e *Engine) mutate(ctx context.Context, id string, t record.Token, invalid *record.Error, decide func(*record.Machine) decision) (record.Ack, error) {
	return e.mutateWith(ctx, id, t, invalid, decide, func(m *record.Machine) { e.launch(m, nil) })
}

// mutateWith is the one accept path of every mutating RPC, in the order the
// contract fixes: the request's own fields (the machine id and invalid,
// which hold no token part), then the fence (before the token's own
// values, before not-found and before the idempotent-retry short-circuit),
// then the machine's own rules. An InvalidArgument changes nothing, not
// even the mark. The fence mark and the new record are committed together
// before the ack; the mark of a machine id that does not exist, and that
// of a newcomer whose call is refused, are kept in memory only (see
// fence.Keeper's Keep).
func (e *Engine) mutateWith(ctx context.Context, id string, t record.Token, invalid *record.Error,
	decide func(*record.Machine) decision, start func(*record.Machine)) (record.Ack, error) {
	if err := firstErr(record.ValidateID("machine_id", id), invalid); err != nil {
		return record.Ack{}, err
	}
	e.awaitListing(ctx, id)
	unlock := e.locks.Lock(id)
	defer unlock()
	if !e.beginAccept() {
		return record.Ack{}, record.Errorf(record.CodeUnavailable, "provider is shutting down; retry against the next instance")
	}
	defer e.runs.Done(acceptingKey) // after start has registered the run it launched
	cur, known := e.idx.Get(id)
	mark, newcomer, ferr := e.fences.Check(id, t, known)
	if ferr != nil {
		return record.Ack{}, ferr
	}
	if !known {
		e.fences.KeepUnknown(id, t, mark)
		return record.Ack{}, record.Errorf(record.CodeNotFound, "machine %q not found", id)
	}
	d := decide(cur)
	if d.next != nil {
		if err := firstErr(e.moves.Refusal(id), e.zoneReady(cur)); err != nil {
			d = decision{err: err}
		}
	}
	if e.listed.WithoutHost(cur.Zone, e.listingHost(cur)) {
		// Its zone was listed without its host: the record may be stale
		// (rebuilt without that host's listing), so neither its rules nor
		// its marks can answer yet, and no mark is recorded either.
		d, mark = decision{err: e.notListed(cur)}, nil
	}
	mark = e.fences.Keep(id, t, mark, newcomer, d.err != nil)
	if err := e.commit(ctx, id, t.ShardID, mark, d.next); err != nil {
		return record.Ack{}, err
	}
	if d.err != nil {
		return record.Ack{}, d.err
	}
	if d.next != nil {
		start(d.next)
		return record.Ack{OperationID: d.opID, Machine: d.next.Clone()}, nil
	}
	return record.Ack{OperationID: d.opID, Machine: cur.Clone()}, nil
}

// commit makes the fence mark and the new record durable, then publishes
// them. The write is detached from the caller's context: once started, an
// acceptance either lands whole or is reported as not accepted.
func (e *Engine) commit(ctx context.Context, id, shard string, mark *record.Mark, next *record.Machine) error {
	if mark == nil && next == nil {
		return nil
	}
	var b record.Batch
	if mark != nil {
		b.Marks = map[record.MarkKey]record.Mark{{ShardID: shard, MachineID: id}: *mark}
	}
	if next != nil {
		next.Revision = e.idx.Reserve()
		b.Machines = []record.Machine{*next}
	}
	if err := e.durable(ctx, b); err != nil {
		if next != nil {
			e.idx.Abandon(next.Revision)
		}
		if errors.Is(err, record.ErrTooLarge) {
			// The request, not the store, is at fault: retrying cannot help,
			// so it must not read as an outage (Unavailable).
			e.log.Warn("store refused a record as too large", "machine", id, "err", err)
			return record.Errorf(record.CodeInvalid, "cannot persist the change: %v", err)
		}
		e.log.Error("store commit failed", "machine", id, "err", err)
		return record.Errorf(record.CodeUnavailable, "cannot persist the change: store unavailable")
	}
	if mark != nil {
		e.fences.Set(id, shard, *mark)
	}
	if next != nil {
		e.idx.Publish(next)
	}
	return nil
}

// durable commits b, turning a panicking store into an error: a reserved
// revision must always be published or abandoned, or publication of every
// later one would wait behind it forever.
func (e *Engine) durable(ctx context.Context, b record.Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("store panicked: %v", p)
		}
	}()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return e.st.Commit(cctx, b)
}

func (e *Engine) zoneReady(m *record.Machine) *record.Error {
	zone := m.Zone
	zr := e.can.ZoneReadiness
	if zr == nil {
		return e.notListed(m)
	}
	if err := zr.ZoneReady(zone); err != nil {
		if e.ownHostAnswers(m) {
			return e.notListed(m) // e.g. its host is declared down: its calls are answered at once
		}
		msg := fmt.Sprintf("host of zone %q is not available", zone)
		if !errors.Is(err, backend.ErrHostUnavailable) {
			msg += ": " + err.Error()
		}
		return record.Errorf(record.CodeUnavailable, "%s", msg)
	}
	return e.notListed(m)
}

// ownHostAnswers: the machine has a host and the backend answers calls on
// it (a host declared down counts: a Delete there completes without it),
// though the zone as a whole cannot take a new machine.
func (e *Engine) ownHostAnswers(m *record.Machine) bool {
	hr := e.can.HostReadiness
	return m.HostName != "" && hr != nil && hr.HostReady(m.Zone, m.HostName) == nil
}

func firstErr(errs ...*record.Error) *record.Error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
