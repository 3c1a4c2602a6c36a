package lifecycle

import (
	"fmt"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"math/rand/v2"
	"testing"
)

// oracle is a deliberately simple model of the contract: the state machine,
// fencing marks and idempotency, with transitions that complete at once.
type oracle struct {
	state   map[string]State
	cluster map[string]string
	lastOp  map[string]OpKind
	marks   map[MarkKey]Mark
}

func (o *oracle) apply(kind OpKind, id, cluster string, t Token) (Code, bool) {
	if t.ShardID != "" {
		k := MarkKey{ShardID: t.ShardID, MachineID: id}
		if m, ok := o.marks[k]; ok && !fence.NewerThanMark(m, t.Epoch, t.Sequence) {
			return CodeFenced, false
		}
		o.marks[k] = Mark{Epoch: t.Epoch, Sequence: t.Sequence}
	}
	s, ok := o.state[id]
	if !ok {
		return CodeNotFound, false
	}
	type edge struct {
		from, to State
	}
	edges := map[OpKind]edge{OpCreate: {Speculative, Idle}, OpConfigure: {Idle, Configured},
		OpDrain: {Configured, Idle}, OpDelete: {Idle, Speculative}}
	e := edges[kind]
	switch {
	case s == e.to && kind == OpConfigure && o.cluster[id] != cluster:
		return CodeAborted, false
	case s == e.to && (kind == OpCreate || kind == OpConfigure || o.lastOp[id] == kind):
		return 0, false // idempotent no-op
	case s != e.from:
		return CodeAborted, false
	}
	o.state[id], o.lastOp[id] = e.to, kind
	o.cluster[id] = ""
	if kind == OpConfigure {
		o.cluster[id] = cluster
	}
	return 0, true
}

func TestRandomizedAgainstOracle(t *testing.T) {
	t.Parallel()
	const machines = 4
	f := newFixture(t, machines)
	o := &oracle{state: map[string]State{}, cluster: map[string]string{}, lastOp: map[string]OpKind{}, marks: map[MarkKey]Mark{}}
	for i := range machines {
		o.state[fmt.Sprintf("m%03d", i)] = Speculative
	}
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []OpKind{OpCreate, OpConfigure, OpDrain, OpDelete}
	for step := range 3000 {
		kind := kinds[rng.IntN(4)]
		id := fmt.Sprintf("m%03d", rng.IntN(machines+1)) // sometimes unknown
		cluster := []string{"c1", "c2"}[rng.IntN(2)]
		var tk Token
		if rng.IntN(4) > 0 {
			tk = tok([]string{"s1", "s2"}[rng.IntN(2)], rng.Int64N(3), rng.Int64N(6))
		}
		wantCode, moved := o.apply(kind, id, cluster, tk)
		var err error
		switch kind {
		case OpCreate:
			_, err = f.e.Create(t.Context(), CreateRequest{MachineID: id, Token: tk})
		case OpConfigure:
			_, err = f.e.Configure(t.Context(), ConfigureRequest{MachineID: id, ClusterID: cluster, Token: tk})
		case OpDrain:
			_, err = f.e.Drain(t.Context(), DrainRequest{MachineID: id, Token: tk})
		case OpDelete:
			_, err = f.e.Delete(t.Context(), DeleteRequest{MachineID: id, Token: tk})
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
