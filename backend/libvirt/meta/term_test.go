package meta

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
)

// A leader's term round-trips; none is written without one; a damaged one
// (no Lease, no count, a negative count) is an error.
func TestMetadataLeaderTerm(t *testing.T) {
	t.Parallel()
	in := Metadata{Provider: "p", MachineID: "m", Term: backend.LeaderTerm{Lease: "0b1c-uid", N: 7}}
	for _, ns := range []bool{true, false} {
		s, err := in.Marshal(ns)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Decode(s)
		if err != nil || out.Term != in.Term {
			t.Fatalf("%s decoded %+v, %v", s, out.Term, err)
		}
	}
	none, _ := Metadata{Provider: "p", MachineID: "m"}.Marshal(false)
	if strings.Contains(none, "leader-term") {
		t.Fatalf("a term written without one: %s", none)
	}
	head := `<instance><provider>p</provider><machine>m</machine>`
	for _, bad := range []string{`<leader-term>3</leader-term>`, `<leader-term lease="u"></leader-term>`,
		`<leader-term lease="u">-1</leader-term>`, `<leader-term lease="u">x</leader-term>`} {
		if _, err := Decode(head + bad + `</instance>`); err == nil {
			t.Fatalf("damaged term accepted: %s", bad)
		}
	}
}

// CheckTerm refuses only a newer term of the provider's own Lease, and
// tells onNewer once; Stamped writes the provider's term, and nothing
// changes for a provider without one (no election).
func TestCheckTermAndStamped(t *testing.T) {
	t.Parallel()
	const prov = "term-test-provider"
	md := func(tm backend.LeaderTerm) Metadata { return Metadata{Provider: prov, MachineID: "m", Term: tm} }
	newer := md(backend.LeaderTerm{Lease: "L", N: 5})
	if err := CheckTerm("d", newer); err != nil {
		t.Fatalf("no election: %v", err)
	}
	if got := Stamped(newer); got.Term != newer.Term {
		t.Fatalf("no election: stamped %+v, want the term left as it is", got.Term)
	}
	var told atomic.Int32
	SetTerm(prov, backend.LeaderTerm{Lease: "L", N: 4}, func(found backend.LeaderTerm) {
		if found.N != 5 {
			t.Errorf("told of term %d, want 5", found.N)
		}
		told.Add(1)
	})
	t.Cleanup(func() { ClearTerm(prov) })
	for range 2 {
		if err := CheckTerm("d", newer); !errors.Is(err, backend.ErrNewerTerm) || !backend.IsTransient(err) || !strings.Contains(err.Error(), "term 5") {
			t.Fatalf("newer term: %v", err)
		}
	}
	if told.Load() != 1 {
		t.Fatalf("onNewer told %d times, want once", told.Load())
	}
	for _, ok := range []backend.LeaderTerm{{}, {Lease: "L", N: 4}, {Lease: "L", N: 3}, {Lease: "other", N: 99}} {
		if err := CheckTerm("d", md(ok)); err != nil {
			t.Fatalf("term %+v refused: %v", ok, err)
		}
		if got := Stamped(md(ok)); got.Term != (backend.LeaderTerm{Lease: "L", N: 4}) {
			t.Fatalf("stamped %+v over %+v, want the provider's own", got.Term, ok)
		}
	}
	if err := CheckTerm("d", Metadata{Provider: "someone-else", Term: backend.LeaderTerm{Lease: "L", N: 9}}); err != nil {
		t.Fatalf("another provider's domain judged by this one's term: %v", err)
	}
}
