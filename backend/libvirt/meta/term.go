package meta

import (
	"fmt"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Under --leader-elect every domain a replica writes carries the term it
// leads under (backend.LeaderTermer), and a replica never changes a
// domain that carries a newer term of the same Lease: a leader that lost
// its Lease without knowing it yet (a frozen process thawed, a clock that
// ran slow) finds, on the first domain the new leader wrote, that it must
// stop. The term is the process's leadership, set once when it starts
// leading, so it is kept here by provider id (--provider) rather than
// threaded through every caller of ReadOwned and Write: those already
// name the provider.

type term struct {
	own     backend.LeaderTerm
	onNewer func(found backend.LeaderTerm)
	told    sync.Once
}

var terms sync.Map // provider id → *term

// SetTerm makes provider's writes carry t and its ownership checks refuse
// a domain with a newer term of t's Lease, telling onNewer once.
func SetTerm(provider string, t backend.LeaderTerm, onNewer func(found backend.LeaderTerm)) {
	terms.Store(provider, &term{own: t, onNewer: onNewer})
}

// ClearTerm forgets provider's term (tests; a process leads once).
func ClearTerm(provider string) { terms.Delete(provider) }

func termOf(provider string) *term {
	if v, ok := terms.Load(provider); ok {
		return v.(*term)
	}
	return nil
}

// CheckTerm returns an error wrapping backend.ErrNewerTerm when md, read
// from domain name, carries a newer term than the one md.Provider acts
// under, and tells that provider's onNewer (once). Nil without a term.
func CheckTerm(name string, md Metadata) error {
	t := termOf(md.Provider)
	if t == nil || !md.Term.Newer(t.own) {
		return nil
	}
	if t.onNewer != nil {
		t.told.Do(func() { t.onNewer(md.Term) })
	}
	return fmt.Errorf("domain %s carries leader term %d of Lease %s, newer than this replica's %d: %w",
		name, md.Term.N, md.Term.Lease, t.own.N, backend.ErrNewerTerm)
}

// Stamped is md carrying the term its provider acts under (md as it is
// without one: with no election nothing changes). Every definition and
// metadata write of a domain goes through it.
func Stamped(md Metadata) Metadata {
	if t := termOf(md.Provider); t != nil && t.own.Lease != "" {
		md.Term = t.own
	}
	return md
}
