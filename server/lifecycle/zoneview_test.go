package lifecycle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Issue 38: a zone decides from one view. Each test failed on the code
// before the arbiter (server/lifecycle/arbiter): a path looked at one
// host's copy and acted on it while another host, not listed, could run
// the guest.

// viewBackend lists zone-a as hosts h1 and h2 holding the copies in
// copies; a host in unlisted is not listed (partitioned), one in down is
// declared down (listed, nothing running). It records Start calls and the
// Configure specs it was given.
type viewBackend struct {
	*testBackend
	mu        sync.Mutex
	copies    []backend.Observed
	unlisted  map[string]bool
	down      map[string]string
	starts    []string
	configure []backend.ConfigureSpec
	answering map[string]bool // declared-down hosts that answer again
	destroyed []string        // DestroyFenced calls: "machine host"
}

func (b *viewBackend) DestroyFenced(_ context.Context, id string, pl backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.destroyed = append(b.destroyed, id+" "+pl.Host)
	for i, o := range b.copies {
		if o.MachineID == id && o.Placement.Host == pl.Host {
			b.copies = append(b.copies[:i], b.copies[i+1:]...)
			break
		}
	}
	return nil
}

func (b *viewBackend) Inventory(ctx context.Context) []backend.ZoneInventory {
	b.mu.Lock()
	defer b.mu.Unlock()
	zi := backend.ZoneInventory{Zone: "zone-a", Down: b.down}
	for _, h := range []string{"h1", "h2"} {
		if _, off := b.down[h]; b.unlisted[h] && !off {
			zi.Unlisted = append(zi.Unlisted, h)
		} else {
			zi.Hosts = append(zi.Hosts, h)
		}
	}
	for _, o := range b.copies {
		_, off := b.down[o.Placement.Host]
		switch {
		case off && b.answering[o.Placement.Host]:
			zi.Fenced = append(zi.Fenced, o)
		case !off && !b.unlisted[o.Placement.Host]:
			zi.Machines = append(zi.Machines, o)
		}
	}
	return []backend.ZoneInventory{zi, {Zone: "zone-b"}}
}

func (b *viewBackend) Start(_ context.Context, id string, pl backend.Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starts = append(b.starts, id+" "+pl.Host)
	return nil
}

func (b *viewBackend) Configure(ctx context.Context, s backend.ConfigureSpec) error {
	b.mu.Lock()
	b.configure = append(b.configure, s)
	b.mu.Unlock()
	if !s.MayStart {
		return s.WhyNotStart
	}
	return b.testBackend.Configure(ctx, s)
}

func (b *viewBackend) set(fn func(b *viewBackend)) { b.mu.Lock(); fn(b); b.mu.Unlock() }

func (b *viewBackend) startCalls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.starts...)
}

// viewFixture: m000 IDLE (CONFIGURED for cluster c1) recorded on h1 of
// zone-a, with copies as given (a copy of m000 on h1 by default).
func viewFixture(t *testing.T, cluster string, tweak ...func(*Config)) (*fixture, *viewBackend, *bytes.Buffer) {
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	vb := &viewBackend{testBackend: f.be, unlisted: map[string]bool{}, down: map[string]string{}, answering: map[string]bool{}}
	f.wrap = vb
	logs := &bytes.Buffer{}
	var mu sync.Mutex
	f.start(6, append([]func(*Config){func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, logs}, nil)) }}, tweak...)...)
	vb.set(func(b *viewBackend) { b.copies = nil }) // the Create's VM is replaced by the copies below
	if cluster == "" {
		f.toIdle("m000")
	} else {
		f.toConfigured("m000", cluster)
	}
	setHost(t, f, "m000", "h1")
	f.be.mu.Lock()
	o := f.be.vms["m000"]
	f.be.mu.Unlock()
	o.Placement.Host, o.ClusterID, o.Running, o.Run = "h1", cluster, true, backend.RunState{State: backend.RunRunning}
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{o} })
	return f, vb, logs
}

var (
	shutOffMigrated  = backend.RunState{State: backend.RunShutoff, Reason: "migrated"}
	shutOffDestroyed = backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}
)

// copyOf returns m000's copy on host with run state rs and binding cluster.
func copyOf(vb *viewBackend, host string, rs backend.RunState, cluster string) backend.Observed {
	vb.mu.Lock()
	defer vb.mu.Unlock()
	o := vb.copies[0]
	o.Placement.Host, o.Run, o.Running, o.ClusterID = host, rs, rs.Up(), cluster
	return o
}

// Case 2: the copy on the recorded host is "shut off (migrated)" and h2,
// which may run the guest, is not listed: reconcile does not restart it
// and says it waits for h2. Once h2 is listed with the guest running
// there, the machine follows it and the stale copy is never started.
func TestRestartWaitsForUnlistedHosts(t *testing.T) {
	t.Parallel()
	obs := &waitObserver{}
	f, vb, _ := viewFixture(t, "", func(c *Config) { c.Observer = obs })
	stale := copyOf(vb, "h1", shutOffMigrated, "")
	live := copyOf(vb, "h2", backend.RunState{State: backend.RunRunning, Reason: "migrated"}, "")
	vb.set(func(b *viewBackend) { b.copies, b.unlisted["h2"] = []backend.Observed{stale, live}, true })
	rep := f.e.Reconcile(context.Background())
	if s := vb.startCalls(); len(s) != 0 || rep.Restarted != 0 {
		t.Fatalf("started a copy on a partial listing: %v", s)
	}
	m, _ := f.e.Get(context.Background(), "m000")
	if !strings.Contains(m.LastError, "not restarted: the copy of m000 on host h1 is shut off (migrated): a migration's source") {
		t.Fatalf("last_error %q", m.LastError)
	}
	// A copy that crashed (not a migration's source) waits for h2 instead.
	crashed := copyOf(vb, "h1", backend.RunState{State: backend.RunShutoff, Reason: "crashed"}, "")
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{crashed} })
	f.e.Reconcile(context.Background())
	if s := vb.startCalls(); len(s) != 0 {
		t.Fatalf("started a copy while h2 is unlisted: %v", s)
	}
	m, _ = f.e.Get(context.Background(), "m000")
	if !strings.Contains(m.LastError, "not restarted: starting m000's stopped domain waits for host(s) h2 of zone zone-a") {
		t.Fatalf("last_error %q", m.LastError)
	}
	if w := obs.seen(); strings.Join(w, ",") != "zone-a "+reconcile.WaitRestart {
		t.Fatalf("observer %v", w)
	}
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{stale, live} })
	vb.set(func(b *viewBackend) { delete(b.unlisted, "h2") })
	f.e.Reconcile(context.Background())
	if s := vb.startCalls(); len(s) != 0 {
		t.Fatalf("started the stale copy: %v", s)
	}
	if m, _ := f.e.Get(context.Background(), "m000"); m.HostName != "h2" {
		t.Fatalf("machine on %q once the zone is whole; want h2, where the guest runs", m.HostName)
	}
}

// Case 2, the other way: the whole zone is listed and no other copy
// exists: the stopped domain is started, as before.
func TestRestartOnAWholeZone(t *testing.T) {
	t.Parallel()
	f, vb, _ := viewFixture(t, "")
	vb.set(func(b *viewBackend) {
		b.copies = []backend.Observed{copyOf(b0(b), "h1", backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}, "")}
	})
	f.e.Reconcile(context.Background())
	if s := vb.startCalls(); strings.Join(s, ",") != "m000 h1" {
		t.Fatalf("starts %v; want m000 on h1", s)
	}
}

// b0 lets copyOf run inside set (the lock is taken there): a copy of the
// current first copy without locking.
func b0(b *viewBackend) *viewBackend { return &viewBackend{copies: b.copies} }

// Case 1: a Configure of an IDLE machine whose stopped copy may be stale
// is told not to start it (the backend then fails it, transiently, naming
// the hosts), and is allowed to once every host is listed.
func TestConfigureStartsOnlyOnAWholeZone(t *testing.T) {
	t.Parallel()
	f, vb, _ := viewFixture(t, "")
	vb.set(func(b *viewBackend) {
		b.copies = []backend.Observed{copyOf(b0(b), "h1", shutOffDestroyed, "")}
		b.unlisted["h2"] = true
	})
	f.e.Reconcile(context.Background())
	ctx := context.Background()
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	var first backend.ConfigureSpec
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		vb.mu.Lock()
		n := len(vb.configure)
		if n > 0 {
			first = vb.configure[0]
		}
		vb.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no Configure reached the backend")
		}
	}
	if first.MayStart || first.WhyNotStart == nil || !backend.IsTransient(first.WhyNotStart) ||
		!strings.Contains(first.WhyNotStart.Error(), "waits for host(s) h2") {
		t.Fatalf("spec MayStart=%v WhyNotStart=%v; want refused, transient, naming h2", first.MayStart, first.WhyNotStart)
	}
	// h2 is listed, without a copy: the retry may start the domain.
	vb.set(func(b *viewBackend) { delete(b.unlisted, "h2") })
	f.e.Reconcile(ctx)
	f.waitState("m000", record.Configured)
}

// Case 1 (allowed): with h2 listed and no copy there, the Configure may
// start the stopped domain.
func TestConfigureMayStartOnAWholeZone(t *testing.T) {
	t.Parallel()
	f, vb, _ := viewFixture(t, "")
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{copyOf(b0(b), "h1", shutOffDestroyed, "")} })
	f.e.Reconcile(context.Background())
	if _, err := f.e.Configure(context.Background(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Configured)
	vb.mu.Lock()
	defer vb.mu.Unlock()
	if s := vb.configure[len(vb.configure)-1]; !s.MayStart || s.WhyNotStart != nil {
		t.Fatalf("MayStart=%v WhyNotStart=%v on a whole zone", s.MayStart, s.WhyNotStart)
	}
}

// Case 3: a CONFIGURED machine recorded on h1, not listed, whose domain
// runs on h2 too: it is not moved while h1 may run the node. An unbound
// spare is never the machine (a Drain there would clear the binding of a
// node still in its cluster). A bound copy is followed once h1 is listed
// without it.
func TestRelocationWaitsForTheRecordedHost(t *testing.T) {
	t.Parallel()
	f, vb, logs := viewFixture(t, "c1")
	bound := copyOf(vb, "h2", backend.RunState{State: backend.RunRunning, Reason: "migrated"}, "c1")
	vb.set(func(b *viewBackend) {
		b.copies = append(b.copies, bound)
		b.unlisted["h1"] = true
	})
	rep := f.e.Reconcile(context.Background())
	if m, _ := f.e.Get(context.Background(), "m000"); m.HostName != "h1" || m.State != record.Configured {
		t.Fatalf("moved to %q (%s) on a partial listing", m.HostName, m.State)
	}
	if len(rep.Waiting) != 1 || !strings.Contains(rep.Waiting[0], "relocation waits for host(s) h1") {
		t.Fatalf("report waiting %q", rep.Waiting)
	}
	spare := bound
	spare.ClusterID = ""
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{spare}; delete(b.unlisted, "h1") }) // h1 listed without it
	f.e.Reconcile(context.Background())
	if m, _ := f.e.Get(context.Background(), "m000"); m.HostName != "h1" {
		t.Fatalf("moved to the unbound spare on %q", m.HostName)
	}
	if !strings.Contains(logs.String(), "not the node") {
		t.Fatalf("no WARN saying why the spare is not the machine:\n%s", logs)
	}
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{bound} })
	f.e.Reconcile(context.Background())
	if m, _ := f.e.Get(context.Background(), "m000"); m.HostName != "h2" {
		t.Fatalf("on %q; want h2, where the bound guest runs and h1 listed without it", m.HostName)
	}
}

// A host declared down: the machine whose only copy was there is FAILED
// naming the declaration (no lookup on the host is needed), and a
// machine elsewhere in the zone is untouched.
func TestDeclaredDownFailsItsMachines(t *testing.T) {
	t.Parallel()
	f, vb, _ := viewFixture(t, "c1")
	vb.set(func(b *viewBackend) { b.down["h1"] = "powered off by IPMI" })
	f.e.Reconcile(context.Background())
	m := f.waitState("m000", record.Failed)
	if m.LastError != "host zone-a/h1 declared down: powered off by IPMI" {
		t.Fatalf("last_error %q", m.LastError)
	}
}

// The fenced rejoin: h1, declared down, answers again still holding the
// copy of m000 (FAILED by the declaration, then released by the operator) and
// a copy of m002, which lives on h2 now. Both are destroyed, never
// started; a copy whose record still names h1 is kept and reported.
func TestFencedRejoinDestroysStaleCopies(t *testing.T) {
	t.Parallel()
	f, vb, logs := viewFixture(t, "c1")
	ctx := context.Background()
	f.toIdle("m002")
	setHost(t, f, "m002", "h2")
	m0 := copyOf(vb, "h1", backend.RunState{State: backend.RunRunning}, "c1")
	m1 := m0
	m1.MachineID, m1.ClusterID, m1.Placement.Domain = "m002", "", "bf-m002"
	m1h2 := m1
	m1h2.Placement.Host = "h2"
	vb.set(func(b *viewBackend) { b.copies = []backend.Observed{m0, m1, m1h2}; b.down["h1"] = "powered off" })
	f.e.Reconcile(ctx)
	f.waitState("m000", record.Failed)
	if _, err := f.e.Release(ctx, "m000"); err != nil { // the operator returns the FAILED slot
		t.Fatal(err)
	}
	f.waitState("m000", record.Speculative)
	vb.set(func(b *viewBackend) { b.answering["h1"] = true })
	f.e.Reconcile(ctx)
	vb.mu.Lock()
	destroyed := strings.Join(vb.destroyed, ",")
	vb.mu.Unlock()
	if destroyed != "m000 h1,m002 h1" && destroyed != "m002 h1,m000 h1" {
		t.Fatalf("destroyed %q; want the deleted m000's and the relocated m002's copies on h1", destroyed)
	}
	if s := vb.startCalls(); len(s) != 0 {
		t.Fatalf("started %v on a fenced rejoin", s)
	}
	m, _ := f.e.Get(ctx, "m002")
	if h := m.History[len(m.History)-1]; h.Outcome != reconcile.OutcomeFencedDestroyed || m.State != record.Idle || m.HostName != "h2" {
		t.Fatalf("m002 %s on %s, history %+v\n%s", m.State, m.HostName, h, f.dump("m002"))
	}
	// A copy whose record names h1 (FAILED by the declaration) is kept.
	f.toIdle("m004") // not needed on h1: a record naming h1 is what matters
	setHost(t, f, "m004", "h1")
	m2 := m0
	m2.MachineID, m2.Placement.Domain = "m004", "bf-m004"
	vb.set(func(b *viewBackend) { b.copies = append(b.copies, m2); b.destroyed = nil })
	f.e.Reconcile(ctx)
	vb.mu.Lock()
	defer vb.mu.Unlock()
	if len(vb.destroyed) != 0 {
		t.Fatalf("destroyed %v: m004's record names h1", vb.destroyed)
	}
	if !strings.Contains(logs.String(), "fenced rejoin: a copy on a host declared down kept") {
		t.Fatalf("no WARN for the kept copy:\n%s", logs)
	}
}

func (f *fixture) dump(id string) string {
	m, _ := f.e.Get(context.Background(), id)
	var b strings.Builder
	for _, h := range m.History {
		b.WriteString(string(h.Kind) + " " + h.From.String() + "->" + h.To.String() + " " + h.Outcome + " " + h.LastError + "\n")
	}
	return b.String()
}
