package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestPropertyZoneView drives the engine through random sequences of
// host events (unreachable, back, declared down, back while declared,
// declaration ended) and operations (Create, Configure, Drain, Delete, a
// migration cut by a provider crash, a restart, a restart after the state
// file is lost, a guest crash) on a zone of three hosts modelled by
// simBackend, which holds the truth: every copy of every machine on every
// host. After every step and at every start it checks (issue 38):
//
//   - never two running copies of one machine;
//   - never a start of a copy while another host holding a copy of that
//     machine is neither listed nor declared down;
//   - never a deleted machine back (IDLE or CONFIGURED with no Create
//     since the Delete BigFleet saw succeed), unless a lost state file
//     left nothing that says it was deleted (see simBackend.tombstoned).
//
// BIGFLEET_ZONEPROP_RUNS sets the runs (seeds); each run is 120 steps.
func TestPropertyZoneView(t *testing.T) {
	t.Parallel()
	runs := 12
	if testing.Short() {
		runs = 3
	}
	if v, err := strconv.Atoi(os.Getenv("BIGFLEET_ZONEPROP_RUNS")); err == nil && v > 0 {
		runs = v
	}
	steps := 0
	for seed := range runs {
		steps += runZoneProp(t, uint64(seed), 120)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d runs, %d steps, every invariant held", runs, steps)
}

var simHosts = []string{"h1", "h2", "h3"}

type simCopy struct {
	host, cluster string
	up            bool
	migrated      bool // stopped by a migration that handed the guest over
}

// simBackend is zone-a, three hosts, and the truth of their copies.
type simBackend struct {
	mu          sync.Mutex
	t           *testing.T
	copies      map[string][]*simCopy
	unreachable map[string]bool
	down        map[string]string
	rr          int
	violations  []string
	// starts counts the copies started (by Start or a Configure).
	starts int
}

func newSim(t *testing.T) *simBackend {
	return &simBackend{t: t, copies: map[string][]*simCopy{}, unreachable: map[string]bool{}, down: map[string]string{}}
}

func (s *simBackend) Zones() []string { return []string{"zone-a"} }
func (s *simBackend) Close() error    { return nil }
func (s *simBackend) Hosts(context.Context) []backend.HostStatus {
	return nil
}

// HostReady is backend.HostReadiness: a mutation of a machine on an
// unreachable host is refused at once instead of waiting for a listing.
func (s *simBackend) HostReady(_, host string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reach(host); err != nil && !errors.Is(err, backend.ErrHostDown) {
		return err
	}
	return nil
}

// ZoneReady is backend.ZoneReadiness: some host answers or is declared down.
func (s *simBackend) ZoneReady(string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range simHosts {
		if err := s.reach(h); err == nil || errors.Is(err, backend.ErrHostDown) {
			return nil
		}
	}
	return backend.ErrHostUnavailable
}

func (s *simBackend) violate(format string, a ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, a...))
}

// reach is the error of a call to host, nil when it answers.
func (s *simBackend) reach(host string) error {
	if why, ok := s.down[host]; ok {
		return fmt.Errorf("host %s declared down: %s: %w", host, why, backend.ErrHostDown)
	}
	if s.unreachable[host] {
		return fmt.Errorf("host %s: %w", host, backend.ErrHostUnavailable)
	}
	return nil
}

func (s *simBackend) copyOn(id, host string) *simCopy {
	for _, c := range s.copies[id] {
		if c.host == host {
			return c
		}
	}
	return nil
}

func pl(id, host string) backend.Placement {
	return backend.Placement{Zone: "zone-a", Host: host, Domain: "bf-" + id}
}

func (s *simBackend) Create(_ context.Context, spec backend.MachineSpec) (backend.Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.copies[spec.MachineID] { // ours already: adopted, but never a stale source (libvirt create.go)
		if s.reach(c.host) == nil && c.migrated {
			s.copies[spec.MachineID] = append(s.copies[spec.MachineID][:i:i], s.copies[spec.MachineID][i+1:]...)
			break
		}
	}
	for _, c := range s.copies[spec.MachineID] {
		if s.reach(c.host) == nil {
			if !c.up {
				s.start(spec.MachineID, c)
			}
			return pl(spec.MachineID, c.host), nil
		}
	}
	for range simHosts {
		s.rr++
		h := simHosts[s.rr%len(simHosts)]
		if s.reach(h) == nil {
			c := &simCopy{host: h}
			s.copies[spec.MachineID] = append(s.copies[spec.MachineID], c)
			s.start(spec.MachineID, c)
			return pl(spec.MachineID, h), nil
		}
	}
	return backend.Placement{}, fmt.Errorf("no host of zone-a answers: %w", backend.ErrHostUnavailable)
}

// start starts c, checking the invariants first.
func (s *simBackend) start(id string, c *simCopy) {
	s.starts++
	for _, o := range s.copies[id] {
		if o == c {
			continue
		}
		if o.up {
			s.violate("%s: started on %s while its copy on %s runs", id, c.host, o.host)
		}
		if _, off := s.down[o.host]; s.unreachable[o.host] && !off && !o.migrated {
			// A migration's stale source there is never started by anyone.
			s.violate("%s: started on %s while %s, unlisted and not declared down, holds a copy that may run", id, c.host, o.host)
		}
	}
	if c.migrated {
		s.violate("%s: started the stale source of a migration on %s", id, c.host)
	}
	c.up = true
}

func (s *simBackend) located(id string, p backend.Placement) (*simCopy, error) {
	if err := s.reach(p.Host); err != nil {
		return nil, err
	}
	c := s.copyOn(id, p.Host)
	if c == nil {
		return nil, fmt.Errorf("%s on %s: %w", id, p.Host, backend.ErrNotFound)
	}
	return c, nil
}

func (s *simBackend) Configure(_ context.Context, spec backend.ConfigureSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.located(spec.MachineID, spec.Placement)
	if err != nil {
		return err
	}
	if !c.up {
		if !spec.MayStart {
			return errors.Join(backend.ErrNotRunning, spec.WhyNotStart)
		}
		s.start(spec.MachineID, c)
	}
	c.cluster = spec.ClusterID
	return nil
}

func (s *simBackend) Drain(_ context.Context, spec backend.DrainSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.located(spec.MachineID, spec.Placement)
	if err != nil {
		return err
	}
	if !c.up {
		return backend.ErrNotRunning
	}
	c.cluster = ""
	return nil
}

// Delete is the libvirt backend's rule: the recorded host's copy (a
// declared-down host is skipped), then every other host that answers.
func (s *simBackend) Delete(_ context.Context, spec backend.DeleteSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := spec.Placement.Host; h != "" {
		if err := s.reach(h); err != nil && !errors.Is(err, backend.ErrHostDown) {
			return err
		}
	}
	var kept []*simCopy
	for _, c := range s.copies[spec.MachineID] {
		if s.reach(c.host) != nil {
			kept = append(kept, c)
		}
	}
	s.copies[spec.MachineID] = kept
	return nil
}

func (s *simBackend) Start(_ context.Context, id string, p backend.Placement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.located(id, p)
	if err != nil {
		return err
	}
	if !c.up {
		s.start(id, c)
	}
	return nil
}

func (s *simBackend) DestroyFenced(_ context.Context, id string, p backend.Placement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, off := s.down[p.Host]; !off || s.unreachable[p.Host] {
		return fmt.Errorf("%s: not a fenced host that answers", p.Host)
	}
	var kept []*simCopy
	for _, c := range s.copies[id] {
		if c.host != p.Host {
			kept = append(kept, c)
		}
	}
	s.copies[id] = kept
	return nil
}

func (s *simBackend) Inventory(context.Context) []backend.ZoneInventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	zi := backend.ZoneInventory{Zone: "zone-a", Down: map[string]string{}}
	for _, h := range simHosts {
		_, off := s.down[h]
		switch {
		case off:
			zi.Down[h] = s.down[h]
			zi.Hosts = append(zi.Hosts, h)
		case s.unreachable[h]:
			zi.Unlisted = append(zi.Unlisted, h)
		default:
			zi.Hosts = append(zi.Hosts, h)
		}
	}
	for id, cs := range s.copies {
		for _, c := range cs {
			o := backend.Observed{MachineID: id, Placement: pl(id, c.host), Running: c.up, ClusterID: c.cluster,
				Run: backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}}
			if c.migrated {
				o.Run.Reason = "migrated"
			}
			if c.up {
				o.Run = backend.RunState{State: backend.RunRunning}
			}
			_, off := s.down[c.host]
			switch {
			case off && !s.unreachable[c.host]:
				zi.Fenced = append(zi.Fenced, o)
			case !off && !s.unreachable[c.host]:
				zi.Machines = append(zi.Machines, o)
			}
		}
	}
	return []backend.ZoneInventory{zi}
}

// zoneSeed is n slots, all in zone-a.
func zoneSeed(n int) []record.Machine {
	out := seed(n)
	for i := range out {
		out[i].Zone = "zone-a"
	}
	return out
}

type zoneProp struct {
	seen    map[record.State]int // machine states seen after the steps, summed
	t       *testing.T
	rng     *rand.Rand
	sim     *simBackend
	st      *memStore
	e       *Engine
	deleted map[string]bool // Delete seen to complete, no Create since
	log     []string
}

func (z *zoneProp) start() {
	cfg := Config{Provider: "test", Seed: zoneSeed(4), CreateTimeout: 300 * time.Millisecond, ConfigureTimeout: 300 * time.Millisecond,
		DrainTimeout: 300 * time.Millisecond, DeleteTimeout: 300 * time.Millisecond, RetryMin: 20 * time.Millisecond}
	e, err := New(cfg, z.st, z.sim)
	if err != nil {
		z.t.Fatal(err)
	}
	z.e = e
	startListed(e, context.Background())
}

// settle waits (bounded) for every machine to leave its transition.
func (z *zoneProp) settle() {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		busy := false
		for _, id := range z.e.idx.IDs() {
			if m, ok := z.e.idx.Get(id); ok && m.State.Transitional() {
				busy = true
			}
		}
		if !busy {
			return
		}
	}
}

func runZoneProp(t *testing.T, seed uint64, steps int) int {
	z := &zoneProp{t: t, rng: rand.New(rand.NewPCG(seed, 38)), sim: newSim(t), st: newMemStore(), deleted: map[string]bool{}, seen: map[record.State]int{}}
	z.start()
	defer func() { z.e.Close() }()
	ctx := context.Background()
	for step := range steps {
		what := z.step(ctx)
		z.sim.mu.Lock()
		z.log = append(z.log, what+" => "+z.truth())
		z.sim.mu.Unlock()
		z.e.Reconcile(ctx)
		z.settle()
		z.check(seed, step)
		if t.Failed() {
			return step
		}
	}
	z.sim.mu.Lock()
	t.Logf("seed %d: machine-steps by state %v; copies started %d; deletes seen %d", seed, z.seen, z.sim.starts, len(z.deleted))
	z.sim.mu.Unlock()
	return steps
}

func (z *zoneProp) id() string { return fmt.Sprintf("m%03d", z.rng.IntN(4)) }

func (z *zoneProp) host() string { return simHosts[z.rng.IntN(len(simHosts))] }

// truth describes machine id's copies and record, for a failure message.
func (z *zoneProp) truth() string {
	out := ""
	for _, id := range z.e.idx.IDs() {
		m, _ := z.e.idx.Get(id)
		out += fmt.Sprintf("%s %s@%s:", id, m.State, m.HostName)
		for _, c := range z.sim.copies[id] {
			out += fmt.Sprintf(" [%s up=%v migrated=%v]", c.host, c.up, c.migrated)
		}
		out += "; "
	}
	return out + fmt.Sprintf("unreachable %v down %v", z.sim.unreachable, z.sim.down)
}

func (z *zoneProp) step(ctx context.Context) string {
	s := z.sim
	switch r := z.rng.IntN(20); {
	case r < 4:
		id := z.id()
		if _, err := z.e.Create(ctx, record.CreateRequest{MachineID: id}); err == nil {
			delete(z.deleted, id)
		}
		return "create " + id
	case r < 6:
		id := z.id()
		_, _ = z.e.Configure(ctx, record.ConfigureRequest{MachineID: id, ClusterID: "c1"})
		return "configure " + id
	case r < 7:
		id := z.id()
		_, _ = z.e.Drain(ctx, record.DrainRequest{MachineID: id})
		return "drain " + id
	case r < 9:
		id := z.id()
		verb := "delete "
		if m, ok := z.e.idx.Get(id); ok && m.State == record.Failed {
			verb = "release " // the operator returns a FAILED slot
			_, _ = z.e.Release(ctx, id)
		} else {
			_, _ = z.e.Delete(ctx, record.DeleteRequest{MachineID: id})
		}
		z.settle()
		if m, ok := z.e.idx.Get(id); ok && m.State == record.Speculative && (m.OpKind == record.OpDelete || m.OpKind == record.OpRelease) {
			z.deleted[id] = true
		}
		return verb + id
	case r < 11:
		h := z.host()
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, off := s.down[h]; !off {
			s.unreachable[h] = !s.unreachable[h]
		}
		return fmt.Sprintf("%s unreachable=%v", h, s.unreachable[h])
	case r < 12:
		h := z.host()
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, off := s.down[h]; !off && s.unreachable[h] { // powered off for sure, then declared
			for _, cs := range s.copies {
				for _, c := range cs {
					if c.host == h {
						c.up = false
					}
				}
			}
			s.down[h] = "powered off"
		}
		return "declare down " + h
	case r < 13:
		h := z.host()
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, off := s.down[h]; off {
			if s.unreachable[h] {
				s.unreachable[h] = false // it answers again, still declared
			} else {
				delete(s.down, h) // libvirtctl up
			}
		}
		return "rejoin " + h
	case r < 14:
		return z.cutMigration()
	case r < 15:
		s.mu.Lock()
		for _, cs := range s.copies {
			for _, c := range cs {
				if c.up && z.rng.IntN(4) == 0 {
					c.up = false
				}
			}
		}
		s.mu.Unlock()
		return "guest crash"
	case r < 17:
		z.e.Close()
		z.start()
		return "restart"
	default:
		z.e.Close()
		z.st = newMemStore()
		z.start()
		return "restart, state file lost"
	}
}

// cutMigration: a provider crash mid-migration, after libvirt moved the
// guest (the source left shut off, "migrated"), before it was recorded;
// the provider restarts on its state file.
func (z *zoneProp) cutMigration() string {
	s := z.sim
	s.mu.Lock()
	moved := ""
	for id, cs := range s.copies {
		if len(cs) != 1 || !cs[0].up || s.reach(cs[0].host) != nil {
			continue
		}
		for _, h := range simHosts {
			if h != cs[0].host && s.reach(h) == nil {
				s.copies[id] = append(cs, &simCopy{host: h, cluster: cs[0].cluster, up: true})
				cs[0].up, cs[0].migrated = false, true
				moved = fmt.Sprintf("cut migration of %s %s -> %s", id, cs[0].host, h)
				break
			}
		}
		if moved != "" {
			break
		}
	}
	s.mu.Unlock()
	z.e.Close()
	z.start()
	return moved + " (restart)"
}

func (z *zoneProp) check(seed uint64, step int) {
	z.t.Helper()
	s := z.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cs := range s.copies {
		n := 0
		for _, c := range cs {
			if c.up {
				n++
			}
		}
		if n > 1 {
			s.violate("%s: %d running copies", id, n)
		}
	}
	for _, id := range z.e.idx.IDs() {
		if m, ok := z.e.idx.Get(id); ok {
			z.seen[m.State]++
		}
	}
	for id := range z.deleted {
		if m, ok := z.e.idx.Get(id); ok && (m.State == record.Idle || m.State == record.Configured) {
			s.violate("%s: deleted, back %s on %s", id, m.State, m.HostName)
		}
	}
	if len(s.violations) > 0 {
		z.t.Fatalf("seed %d step %d: %v\nsteps: %q", seed, step, s.violations, z.log)
	}
}
