package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	lc "github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
	"github.com/bigfleet/libvirt-provider/server/store/storetest"
)

// rig is an engine on a real bbolt file behind a fault injector, with the
// fake backend.
type rig struct {
	t  *testing.T
	e  *lc.Engine
	st *storetest.Faulty
}

func newRig(t *testing.T, n int) *rig {
	t.Helper()
	bolt, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"), store.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	seed := make([]record.Machine, n)
	for i := range seed {
		seed[i] = record.Machine{ID: fmt.Sprintf("m%d", i), Zone: "zone-a", InstanceType: "kvm.small",
			CapacityType: record.CapacityOnDemand, VCPU: 1, MemoryMiB: 512}
	}
	r := &rig{t: t, st: storetest.Wrap(bolt)}
	r.e, err = lc.New(lc.Config{Provider: "test", Seed: seed}, r.st, fake.New(fake.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	r.e.Start(t.Context())
	listed, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r.e.WaitFirstReconcile(listed)
	t.Cleanup(r.e.Close)
	return r
}

func (r *rig) state(id string) record.State {
	m, err := r.e.Get(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return m.State
}

func (r *rig) wait(id string, s record.State) {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.state(id) != s; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			m, _ := r.e.Get(context.Background(), id)
			r.t.Fatalf("%s is %s (%q), want %s", id, m.State, m.LastError, s)
		}
	}
}

// ops are the four mutations, each on a machine already in its from-state,
// with a token from one shard.
func ops(e *lc.Engine, seq int64) map[string]func() error {
	tok := record.Token{ShardID: "shard", Epoch: 1, Sequence: seq}
	ctx := context.Background()
	return map[string]func() error{
		"create": func() error { _, err := e.Create(ctx, record.CreateRequest{MachineID: "m0", Token: tok}); return err },
		"configure": func() error {
			_, err := e.Configure(ctx, record.ConfigureRequest{MachineID: "m1", ClusterID: "c", Token: tok})
			return err
		},
		"drain":  func() error { _, err := e.Drain(ctx, record.DrainRequest{MachineID: "m2", Token: tok}); return err },
		"delete": func() error { _, err := e.Delete(ctx, record.DeleteRequest{MachineID: "m3", Token: tok}); return err },
	}
}

// Acceptance through a failing store (write error, full disk, fsync error)
// is Unavailable and changes nothing: the state, the revision and the
// fence mark (the same token is accepted once the store heals).
func TestAcceptanceWithFailingStore(t *testing.T) {
	t.Parallel()
	faults := map[string]func(*storetest.Faulty){
		"write error": func(f *storetest.Faulty) { f.FailWrites(errors.New("write state.db: input/output error")) },
		"disk full":   (*storetest.Faulty).DiskFull,
		"fsync error": (*storetest.Faulty).FsyncError,
	}
	for name, inject := range faults {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 4)
			ctx := t.Context()
			for _, id := range []string{"m1", "m2", "m3"} {
				r.e.Create(ctx, record.CreateRequest{MachineID: id})
				r.wait(id, record.Idle)
			}
			r.e.Configure(ctx, record.ConfigureRequest{MachineID: "m2", ClusterID: "c"})
			r.wait("m2", record.Configured)
			before := map[string]record.State{"m0": record.Speculative, "m1": record.Idle, "m2": record.Configured, "m3": record.Idle}
			l, _ := r.e.List(ctx, record.ListQuery{})
			inject(r.st)
			for op, do := range ops(r.e, 1) {
				var le *record.Error
				if err := do(); !errors.As(err, &le) || le.Code != record.CodeUnavailable {
					t.Errorf("%s: %v, want Unavailable", op, err)
				}
			}
			for id, s := range before {
				if got := r.state(id); got != s {
					t.Errorf("%s changed to %s through a failing store", id, got)
				}
			}
			if d, _ := r.e.List(ctx, record.ListQuery{Since: l.Revision}); len(d.Machines) != 0 {
				t.Errorf("revision moved: %d changed", len(d.Machines))
			}
			r.st.Heal()
			for op, do := range ops(r.e, 1) {
				if err := do(); err != nil {
					t.Errorf("%s after heal with the same token: %v (the mark advanced?)", op, err)
				}
			}
		})
	}
}

// One call of the store fails, at every position of a full lifecycle
// (acceptances and outcomes alike): a refused acceptance is retried by the
// client as BigFleet would, a failed outcome commit by the engine, and the
// machine goes all the way round, never FAILED.
func TestOneFailedCommitAnywhere(t *testing.T) {
	t.Parallel()
	const commits = 8 // four acceptances and four outcomes
	for n := 1; n <= commits; n++ {
		t.Run(fmt.Sprint("commit ", n), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 1)
			r.st.FailCall(n, storetest.ErrFsync("state.db"))
			ctx := t.Context()
			steps := []struct {
				do   func() error
				want record.State
			}{
				{func() error { _, err := r.e.Create(ctx, record.CreateRequest{MachineID: "m0"}); return err }, record.Idle},
				{func() error {
					_, err := r.e.Configure(ctx, record.ConfigureRequest{MachineID: "m0", ClusterID: "c"})
					return err
				}, record.Configured},
				{func() error { _, err := r.e.Drain(ctx, record.DrainRequest{MachineID: "m0"}); return err }, record.Idle},
				{func() error { _, err := r.e.Delete(ctx, record.DeleteRequest{MachineID: "m0"}); return err }, record.Speculative},
			}
			for i, s := range steps {
				err := s.do()
				if err != nil {
					if err = s.do(); err != nil { // the client's retry
						t.Fatalf("step %d: %v", i, err)
					}
				}
				r.wait("m0", s.want)
			}
			if r.st.Failed() != 1 {
				t.Fatalf("the fault hit %d commits", r.st.Failed())
			}
		})
	}
}
