package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// oracle is a deliberately simple model of the contract: the state machine,
// fencing marks and idempotency, with transitions that complete at once.
type oracle struct {
	state   map[string]record.State
	cluster map[string]string
	lastOp  map[string]record.OpKind
	marks   map[record.MarkKey]record.Mark
}

func (o *oracle) apply(kind record.OpKind, id, cluster string, t record.Token) (record.Code, bool) {
	if t.ShardID != "" {
		k := record.MarkKey{ShardID: t.ShardID, MachineID: id}
		if m, ok := o.marks[k]; ok && !fence.NewerThanMark(m, t.Epoch, t.Sequence) {
			return record.CodeFenced, false
		}
		o.marks[k] = record.Mark{Epoch: t.Epoch, Sequence: t.Sequence}
	}
	s, ok := o.state[id]
	if !ok {
		return record.CodeNotFound, false
	}
	type edge struct {
		from, to record.State
	}
	edges := map[record.OpKind]edge{record.OpCreate: {record.Speculative, record.Idle}, record.OpConfigure: {record.Idle, record.Configured},
		record.OpDrain: {record.Configured, record.Idle}, record.OpDelete: {record.Idle, record.Speculative}}
	e := edges[kind]
	switch {
	case s == e.to && kind == record.OpConfigure && o.cluster[id] != cluster:
		return record.CodeAborted, false
	case s == e.to && (kind == record.OpCreate || kind == record.OpConfigure || o.lastOp[id] == kind):
		return 0, false // idempotent no-op
	case s != e.from:
		return record.CodeAborted, false
	}
	o.state[id], o.lastOp[id] = e.to, kind
	o.cluster[id] = ""
	if kind == record.OpConfigure {
		o.cluster[id] = cluster
	}
	return 0, true
}

func TestRandomizedAgainstOracle(t *testing.T) {
	t.Parallel()
	const machines = 4
	f := newFixture(t, machines)
	o := &oracle{state: map[string]record.State{}, cluster: map[string]string{}, lastOp: map[string]record.OpKind{}, marks: map[record.MarkKey]record.Mark{}}
	for i := range machines {
		o.state[fmt.Sprintf("m%03d", i)] = record.Speculative
	}
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []record.OpKind{record.OpCreate, record.OpConfigure, record.OpDrain, record.OpDelete}
	for step := range 3000 {
		kind := kinds[rng.IntN(4)]
		id := fmt.Sprintf("m%03d", rng.IntN(machines+1)) // sometimes unknown
		cluster := []string{"c1", "c2"}[rng.IntN(2)]
		var tk record.Token
		if rng.IntN(4) > 0 {
			tk = tok([]string{"s1", "s2"}[rng.IntN(2)], rng.Int64N(3), rng.Int64N(6))
		}
		wantCode, moved := o.apply(kind, id, cluster, tk)
		var err error
		switch kind {
		case record.OpCreate:
			_, err = f.e.Create(t.Context(), record.CreateRequest{MachineID: id, Token: tk})
		case record.OpConfigure:
			_, err = f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: id, ClusterID: cluster, Token: tk})
		case record.OpDrain:
			_, err = f.e.Drain(t.Context(), record.DrainRequest{MachineID: id, Token: tk})
		case record.OpDelete:
			_, err = f.e.Delete(t.Context(), record.DeleteRequest{MachineID: id, Token: tk})
		}
		if got := codeOf(err); got != wantCode {
			t.Fatalf("step %d: %s %s %+v: code %d (%v), oracle says %d", step, kind, id, tk, got, err, wantCode)
		}
		if moved {
			m := f.waitState(id, o.state[id])
			if m.Cluster != o.cluster[id] {
				t.Fatalf("step %d: cluster %q, oracle %q", step, m.Cluster, o.cluster[id])
			}
		}
	}
}
