package arbiter

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

var (
	running  = backend.RunState{State: backend.RunRunning}
	shutoff  = backend.RunState{State: backend.RunShutoff, Reason: "destroyed"}
	migrated = backend.RunState{State: backend.RunShutoff, Reason: "migrated"}
)

func cp(id, host string, rs backend.RunState, cluster string) backend.Observed {
	return backend.Observed{MachineID: id, Placement: backend.Placement{Zone: "z", Host: host, Domain: "bf-" + id}, Run: rs, ClusterID: cluster}
}

func zoneOf(listed, unlisted []string, down map[string]string, copies ...backend.Observed) *View {
	hosts := append(append([]string{}, listed...), keys(down)...)
	return FromInventory(backend.ZoneInventory{Zone: "z", Hosts: hosts, Unlisted: unlisted, Down: down, Machines: copies}, time.Now())
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func idle(host string) *record.Machine {
	return &record.Machine{ID: "m", Zone: "z", State: record.Idle, HostName: host, Domain: "bf-m"}
}

func TestMayStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *View
		want Kind
		says string
	}{
		{"every host listed, no other copy", zoneOf([]string{"a", "b"}, nil, nil, cp("m", "a", shutoff, "")), Act, ""},
		{"case 2: the host that may run the guest is unlisted", zoneOf([]string{"a"}, []string{"b"}, nil, cp("m", "a", shutoff, "")), Wait, "host(s) b"},
		{"the guest runs elsewhere", zoneOf([]string{"a", "b"}, nil, nil, cp("m", "a", shutoff, ""), cp("m", "b", running, "")), Refuse, "runs on host b"},
		{"other host declared down", zoneOf([]string{"a"}, nil, map[string]string{"b": "powered off"}, cp("m", "a", shutoff, "")), Act, ""},
		{"recorded host declared down", zoneOf([]string{"b"}, nil, map[string]string{"a": "psu"}, nil...), Refuse, "declared down: psu"},
		{"no view yet", nil, Wait, "waits for a listing"},
		{"the recorded host itself unlisted (the caller saw it)", zoneOf([]string{"b"}, []string{"a"}, nil), Act, ""},
		{"a whole zone (one unnamed host)", FromInventory(backend.ZoneInventory{Zone: "z"}, time.Now()), Act, ""},
		{"a migration's stale source, every host listed", zoneOf([]string{"a", "b"}, nil, nil, cp("m", "a", migrated, "")), Refuse, "a migration's source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := MayStart(idle("a"), tc.v, "a")
			if v.Kind != tc.want || !strings.Contains(v.Why, tc.says) {
				t.Fatalf("got %s %q, want %s containing %q", v.Kind, v.Why, tc.want, tc.says)
			}
			if (v.Err() == nil) != (tc.want == Act) || (tc.want == Wait) != backend.IsTransient(v.Err()) {
				t.Fatalf("Err() = %v for %s", v.Err(), v.Kind)
			}
		})
	}
	if v := MayStart(&record.Machine{ID: "m", Zone: "z", HostName: ""}, FromInventory(backend.ZoneInventory{Zone: "z"}, time.Now()), ""); v.Kind != Act {
		t.Fatalf("a whole zone's record without host: %s %s", v.Kind, v.Why)
	}
	// The copy found is not the recorded one (the property test's find:
	// the recorded host h3 unlisted, a stale shut-off copy listed on h1).
	v := zoneOf([]string{"b"}, []string{"a"}, nil, cp("m", "b", shutoff, ""))
	if vd := MayStart(idle("a"), v, "b"); vd.Kind != Refuse || !strings.Contains(vd.Why, "not the one its record names") {
		t.Fatalf("start of a copy that is not the recorded one: %s %q", vd.Kind, vd.Why)
	}
}

func TestRelocate(t *testing.T) {
	conf := &record.Machine{ID: "m", Zone: "z", State: record.Configured, Cluster: "c1", HostName: "a", Domain: "bf-m"}
	for _, tc := range []struct {
		name string
		m    *record.Machine
		v    *View
		o    backend.Observed
		want Kind
		says string
	}{
		{"case 3: recorded host unlisted", conf, zoneOf([]string{"b"}, []string{"a"}, nil), cp("m", "b", running, "c1"), Wait, "host(s) a"},
		{"case 3: the copy is an unbound spare", conf, zoneOf([]string{"a", "b"}, nil, nil), cp("m", "b", running, ""), Refuse, "not the node"},
		{"recorded host listed without it", conf, zoneOf([]string{"a", "b"}, nil, nil), cp("m", "b", running, "c1"), Act, ""},
		{"recorded host declared down", conf, zoneOf([]string{"b"}, nil, map[string]string{"a": "x"}), cp("m", "b", running, "c1"), Act, ""},
		{"both run", idle("a"), zoneOf([]string{"a", "b"}, nil, nil, cp("m", "a", running, "")), cp("m", "b", running, ""), Refuse, "two running"},
		{"the copy is not running", idle("a"), zoneOf([]string{"a", "b"}, nil, nil), cp("m", "b", shutoff, ""), Refuse, "not running"},
		{"idle: stale source shut off", idle("a"), zoneOf([]string{"a", "b"}, nil, nil, cp("m", "a", shutoff, "")), cp("m", "b", running, ""), Act, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Relocate(tc.m, tc.v, tc.o)
			if v.Kind != tc.want || !strings.Contains(v.Why, tc.says) {
				t.Fatalf("got %s %q, want %s containing %q", v.Kind, v.Why, tc.want, tc.says)
			}
		})
	}
}

func TestAdopt(t *testing.T) {
	m := &record.Machine{ID: "m", Zone: "z", State: record.Speculative}
	if v := Adopt(m, cp("m", "a", migrated, "")); v.Kind != Refuse || !strings.Contains(v.Why, "stale source") {
		t.Fatalf("adopt a stale source: %s %q", v.Kind, v.Why)
	}
	if v := Adopt(m, cp("m", "a", shutoff, "c1")); v.Kind != Act {
		t.Fatalf("adopt a shut-off copy: %s %q", v.Kind, v.Why)
	}
}

func TestGone(t *testing.T) {
	v := zoneOf([]string{"b"}, nil, map[string]string{"a": "PSU failed"})
	g := Gone(idle("a"), v)
	if g.Kind != Act || g.Why != "host z/a declared down: PSU failed" {
		t.Fatalf("got %s %q", g.Kind, g.Why)
	}
	if g := Gone(idle("b"), v); g.Kind != Refuse {
		t.Fatalf("a listed host explains nothing: %s", g.Kind)
	}
	v = zoneOf([]string{"b"}, nil, map[string]string{"a": "x"}, cp("m", "b", running, ""))
	if g := Gone(idle("a"), v); g.Kind != Refuse {
		t.Fatalf("a copy elsewhere: %s %s", g.Kind, g.Why)
	}
	if g := Gone(idle("a"), nil); g.Kind != Refuse {
		t.Fatalf("no view: %s", g.Kind)
	}
	if vd := Relocate(idle("a"), nil, cp("m", "b", running, "")); vd.Kind != Wait {
		t.Fatalf("relocate without a view: %s", vd.Kind)
	}
	if !errors.Is(refuse("x").Err(), ErrRefused) {
		t.Fatal("refuse's error")
	}
}

func TestViewsKeepNewest(t *testing.T) {
	s := NewViews()
	now := time.Now()
	s.Put(FromInventory(backend.ZoneInventory{Zone: "z", Hosts: []string{"a"}}, now))
	s.Put(FromInventory(backend.ZoneInventory{Zone: "z", Hosts: []string{"b"}}, now.Add(-time.Second)))
	if got := s.Get("z").Hosts(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("an older listing replaced a newer one: %v", got)
	}
	if s.Get("other") != nil {
		t.Fatal("a zone never viewed has a view")
	}
	bad := FromInventory(backend.ZoneInventory{Zone: "z", Hosts: []string{"a"}, Err: errors.New("x")}, now)
	if bad.State("a") != Unlisted {
		t.Fatal("a failed listing covers its hosts")
	}
}

// TestPropertyNeverTwoRunning checks the arbiter against the truth: a zone
// whose hosts hold random copies of one machine, some hosts hidden from
// the listing (partitioned) and some declared down (off: nothing runs
// there, as the declaration asserts). Whenever MayStart acts, starting
// the recorded copy leaves exactly one running copy in the truth; whenever
// Relocate acts, the recorded host runs no copy in the truth and a
// CONFIGURED machine's new copy carries its binding.
func TestPropertyNeverTwoRunning(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 1))
	hosts := []string{"a", "b", "c", "d"}
	const runs = 200000
	acts := 0
	for range runs {
		var truth []backend.Observed
		var listed, unlisted []string
		down := map[string]string{}
		for _, h := range hosts {
			standing := rng.IntN(3)
			if standing == 2 {
				down[h] = "off"
			} else if standing == 1 {
				unlisted = append(unlisted, h)
			} else {
				listed = append(listed, h)
			}
			if rng.IntN(3) == 0 {
				rs, cl := shutoff, ""
				if standing != 2 && rng.IntN(2) == 0 {
					rs = running
				}
				if rng.IntN(2) == 0 {
					cl = "c1"
				}
				truth = append(truth, cp("m", h, rs, cl))
			}
		}
		var seen []backend.Observed
		for _, c := range truth {
			if _, off := down[c.Placement.Host]; !off && !contains(unlisted, c.Placement.Host) {
				seen = append(seen, c)
			}
		}
		v := zoneOf(listed, unlisted, down, seen...)
		m := idle(hosts[rng.IntN(len(hosts))])
		if rng.IntN(2) == 0 {
			m.State, m.Cluster = record.Configured, "c1"
		}
		at := hosts[rng.IntN(len(hosts))]
		if MayStart(m, v, at).Kind == Act {
			acts++
			if n := runningElsewhere(truth, at); n > 0 {
				t.Fatalf("MayStart acted with %d other running copies: truth %v, listed %v unlisted %v down %v", n, truth, listed, unlisted, down)
			}
		}
		for _, o := range seen {
			if o.Placement.Host == m.HostName || Relocate(m, v, o).Kind != Act {
				continue
			}
			acts++
			if runningOn(truth, m.HostName) || (m.State == record.Configured && o.ClusterID != m.Cluster) {
				t.Fatalf("Relocate acted onto %s while the recorded host %s runs the guest: truth %v, unlisted %v", o.Placement.Host, m.HostName, truth, unlisted)
			}
		}
	}
	if acts < runs/10 {
		t.Fatalf("only %d of %d runs acted: the property checks too little", acts, runs)
	}
	t.Logf("%d random zones, %d actions checked against the truth", runs, acts)
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

func runningElsewhere(truth []backend.Observed, host string) int {
	n := 0
	for _, c := range truth {
		if c.Placement.Host != host && c.Run.Up() {
			n++
		}
	}
	return n
}

func runningOn(truth []backend.Observed, host string) bool {
	for _, c := range truth {
		if c.Placement.Host == host && c.Run.Up() {
			return true
		}
	}
	return false
}
