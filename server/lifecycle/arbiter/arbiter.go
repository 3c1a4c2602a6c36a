// Package arbiter decides which copy of a machine is real. Every path
// that would start, restart, relocate or fail a machine's domain asks it,
// with the machine's record and one whole-zone view of the machine's
// copies (View): each host of the zone listed (its copies known), not
// listed (it may hold anything), or declared down by the operator (it
// counts as listed with nothing running). The answer is Act on one copy,
// Wait (naming the hosts that could hold another copy) or Refuse (with
// the cause). No path decides from one host's word: a stopped copy is
// started only when no other host could run the guest, and a machine is
// moved to a copy elsewhere only when its recorded host was listed or is
// declared down.
//
// The package has one job and no state beyond the latest views (Views):
// it makes no backend call and changes no record.
package arbiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Kind is what a Verdict says to do.
type Kind uint8

const (
	// Act: go ahead, on Verdict.Copy where the decision names one.
	Act Kind = iota
	// Wait: hosts of the zone that could hold another copy are neither
	// listed nor declared down (Verdict.Hosts); decide again later.
	Wait
	// Refuse: the view shows the action would be wrong (Verdict.Why).
	Refuse
)

func (k Kind) String() string {
	return [...]string{"act", "wait", "refuse"}[k]
}

// Verdict is the arbiter's answer.
type Verdict struct {
	Kind  Kind
	Copy  backend.Observed // Act: the copy to act on (zero when none is needed)
	Hosts []string         // Wait: the hosts waited for, sorted
	Why   string           // Wait and Refuse: the cause, for last_error and the log
}

// ErrWait is wrapped by a Wait verdict's error: transient, the decision
// is taken again once the hosts it names are listed or declared down.
var ErrWait = fmt.Errorf("waiting for hosts that could hold another copy: %w", backend.ErrTransient)

// ErrRefused is wrapped by a Refuse verdict's error.
var ErrRefused = errors.New("refused by the zone's view of the machine's copies")

// Err is nil for Act, else an error that says why (Wait: transient).
func (v Verdict) Err() error {
	switch v.Kind {
	case Wait:
		return fmt.Errorf("%s: %w", v.Why, ErrWait)
	case Refuse:
		return fmt.Errorf("%s: %w", v.Why, ErrRefused)
	}
	return nil
}

func act(c backend.Observed) Verdict { return Verdict{Kind: Act, Copy: c} }

func refuse(format string, a ...any) Verdict {
	return Verdict{Kind: Refuse, Why: fmt.Sprintf(format, a...)}
}

func wait(v *View, hosts []string, what string) Verdict {
	return Verdict{Kind: Wait, Hosts: hosts, Why: fmt.Sprintf("%s waits for host(s) %s of zone %s, neither listed nor declared down",
		what, strings.Join(hosts, ", "), v.Zone)}
}

// MayStart decides whether machine m's stopped copy on host may be
// started (reconcile's restart of an IDLE machine, a Configure of an IDLE
// machine whose domain stopped): only the copy on its recorded host, only
// if no other copy of the machine runs, and only if every other host of
// the zone is listed or declared down. A copy "shut off (migrated)" is a
// migration's source: the guest may run on a host that is not listed, so
// starting it would run the node twice.
func MayStart(m *record.Machine, v *View, host string) Verdict {
	if v == nil {
		return Verdict{Kind: Wait, Why: fmt.Sprintf("starting %s's domain waits for a listing of zone %s", m.ID, m.Zone)}
	}
	if why, down := v.DownReason(host); down {
		return refuse("host %s/%s declared down: %s; its copy of %s is never started", v.Zone, host, why, m.ID)
	}
	if host != m.HostName {
		return refuse("the copy of %s on host %s is not the one its record names (host %s): never started", m.ID,
			hostName(host), hostName(m.HostName))
	}
	if c, ok := v.copyOn(m.ID, host); ok && StaleSource(c) {
		return refuse("the copy of %s on host %s is %s: a migration's source, the guest moved on; never started", m.ID, hostName(host), c.Run)
	}
	for _, c := range v.Copies(m.ID) {
		if c.Placement.Host != host && c.Run.Up() {
			return refuse("%s runs on host %s of zone %s, not its recorded host %s: the copy there is stale and is never started",
				m.ID, c.Placement.Host, v.Zone, hostName(host))
		}
	}
	if un := v.unlisted(host); len(un) > 0 {
		return wait(v, un, "starting "+m.ID+"'s stopped domain")
	}
	c, _ := v.copyOn(m.ID, host)
	return act(c)
}

// StaleSource reports whether a copy is a live migration's source that
// handed the guest over: libvirt leaves it "shut off (migrated)" only once
// the destination runs the guest (a failed migration resumes the source).
// It is never the machine: starting it would run the node twice or roll
// it back in time, adopting it would bring back a machine whose live copy
// was deleted.
func StaleSource(c backend.Observed) bool {
	return c.Run.State == backend.RunShutoff && c.Run.Reason == "migrated"
}

// Adopt decides whether a SPECULATIVE record with no domain (a seed, or
// rebuilt after a lost state file) takes copy o as its machine: never a
// migration's stale source.
func Adopt(m *record.Machine, o backend.Observed) Verdict {
	if StaleSource(o) {
		return refuse("the copy of %s on host %s is %s: a migration's stale source, never adopted", m.ID, hostName(o.Placement.Host), o.Run)
	}
	return act(o)
}

// Relocate decides whether machine m, recorded on one host, now lives in
// copy o found running on another host of its zone (a migration that
// finished in libvirt but was never recorded). Only if the recorded host
// was listed (and holds no running copy) or is declared down: a recorded
// host that was not listed may still run the guest, and o may be a spare
// (a half-built Create, a migration's stale destination). A CONFIGURED
// machine moves only to a copy bound to its cluster: an unbound copy never
// joined a node, so a Drain there would clear the binding of a node that
// stays in its cluster.
func Relocate(m *record.Machine, v *View, o backend.Observed) Verdict {
	switch {
	case !o.Run.Up():
		return refuse("the copy of %s on host %s is %s, not running", m.ID, o.Placement.Host, o.Run)
	case m.State == record.Configured && o.ClusterID != m.Cluster:
		return refuse("the copy of %s on host %s is bound to cluster %q, not the machine's %q: not the node", m.ID,
			o.Placement.Host, o.ClusterID, m.Cluster)
	case v == nil:
		return Verdict{Kind: Wait, Why: fmt.Sprintf("moving %s waits for a listing of zone %s", m.ID, m.Zone)}
	}
	switch v.State(m.HostName) {
	case Down:
		return act(o)
	case Unlisted:
		return wait(v, []string{m.HostName}, "moving "+m.ID+" to host "+o.Placement.Host)
	}
	if c, ok := v.copyOn(m.ID, m.HostName); ok && c.Run.Up() {
		return refuse("%s runs on its recorded host %s too: two running copies, the operator decides", m.ID, m.HostName)
	}
	return act(o)
}

// Gone decides whether machine m, missing from its zone's listing, is
// lost because its recorded host was declared down: Act (with the cause
// in Why, "host ZONE/HOST declared down: REASON") when no copy of it
// exists elsewhere. Refuse means the declaration does not explain it
// (its host is not declared down); the caller's usual rules apply.
func Gone(m *record.Machine, v *View) Verdict {
	if v == nil {
		return refuse("zone %s has no view yet", m.Zone)
	}
	why, down := v.DownReason(m.HostName)
	if !down {
		return refuse("host %s of zone %s is not declared down", hostName(m.HostName), v.Zone)
	}
	if cs := v.Copies(m.ID); len(cs) > 0 {
		return refuse("%s has a copy on host %s", m.ID, cs[0].Placement.Host)
	}
	return Verdict{Kind: Act, Why: fmt.Sprintf("host %s/%s declared down: %s", v.Zone, m.HostName, why)}
}

func hostName(h string) string {
	if h == "" {
		return "(none recorded)"
	}
	return h
}

// sorted returns the keys of a set, sorted.
func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}
