//go:build soak

package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// The invariant classes of the closing line, plus "other" for what the
// line has no column for (an unexpected RPC code, an acknowledged operation
// that ended somewhere the soak cannot explain, a SIGTERM ignored).
const (
	clOrphan   = "orphans"
	clBinding  = "lost_bindings"
	clFalse    = "false_failed"
	clStuck    = "stuck"
	clOther    = "other"
	stuckGrace = 45 * time.Second // reconcile period + commit + scheduling on a busy 2-core host
)

// opRecord is one mutation a client sent and what became of it.
type opRecord struct {
	Client, Machine, Kind string
	Target                pb.MachineState
	Cluster               string // Configure only
	OpID                  string // "" when no attempt was acknowledged
	Sent, Acked, Ended    time.Time
	Outcome               string
}

// faultEvent is one injected fault, with what the soak needs to judge the
// failures around it.
type faultEvent struct {
	Kind       faultKind
	Start, End time.Time
	Note       string
	// CutShort: a SIGTERM'd provider that needed its whole --shutdown-timeout
	// (or had to be SIGKILLed) may have cut in-flight work short.
	CutShort bool
}

// binding is what a client last asked a machine to be bound to.
type binding struct {
	Cluster string
	Meta    map[string]string
}

// ledger keeps everything the checks compare against, behind one mutex.
type ledger struct {
	mu         sync.Mutex
	ops        []*opRecord
	faults     []*faultEvent      // End is zero while the fault is under way
	sent       map[string]binding // machine → last Configure sent
	classified map[string]bool    // machine → its current FAILED state is already judged
	seen       map[string]bool    // violation keys, so a lasting problem counts once
	counts     map[string]int
	details    []string
}

func newLedger() *ledger {
	return &ledger{sent: map[string]binding{}, classified: map[string]bool{}, seen: map[string]bool{},
		counts: map[string]int{}}
}

func (l *ledger) addOp(o *opRecord) {
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

func (l *ledger) setOutcome(o *opRecord, outcome string) {
	l.mu.Lock()
	o.Outcome, o.Ended = outcome, time.Now()
	l.mu.Unlock()
}

func (l *ledger) setSent(id string, b binding) {
	l.mu.Lock()
	l.sent[id] = b
	l.mu.Unlock()
}

func (l *ledger) sentTo(id string) (binding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.sent[id]
	return b, ok
}

func (l *ledger) markClassified(id string, v bool) {
	l.mu.Lock()
	l.classified[id] = v
	l.mu.Unlock()
}

func (l *ledger) isClassified(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.classified[id]
}

// beginFault records a fault before it is injected: a failure it causes
// may be judged while the injection is still under way (a provider SIGKILL
// mid-Configure is judged as soon as the restarted provider answers).
func (l *ledger) beginFault(kind faultKind) *faultEvent {
	ev := &faultEvent{Kind: kind, Start: time.Now()}
	l.addFault(ev)
	return ev
}

func (l *ledger) addFault(ev *faultEvent) {
	l.mu.Lock()
	l.faults = append(l.faults, ev)
	l.mu.Unlock()
}

// editFault changes a recorded fault under the ledger's lock.
func (l *ledger) editFault(ev *faultEvent, edit func(*faultEvent)) {
	l.mu.Lock()
	edit(ev)
	l.mu.Unlock()
}

// faultsBetween returns the faults of kind that overlapped [from, to].
func (l *ledger) faultsBetween(kind faultKind, from, to time.Time) []faultEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []faultEvent
	for _, f := range l.faults {
		end := f.End
		if end.IsZero() {
			end = to
		}
		if f.Kind == kind && !f.Start.After(to) && !end.Before(from) {
			out = append(out, *f)
		}
	}
	return out
}

// recentFaults describes the faults of the last window, for violation details.
func (l *ledger) recentFaults(at time.Time, window time.Duration, t0 time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, f := range l.faults {
		end := f.End
		if end.IsZero() {
			end = at
		}
		if end.After(at.Add(-window)) && !f.Start.After(at) {
			s = append(s, fmt.Sprintf("%s@%.1fs-%.1fs(%s)", f.Kind, f.Start.Sub(t0).Seconds(), end.Sub(t0).Seconds(), f.Note))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// violate records one violation; key makes a lasting problem count once.
func (l *ledger) violate(class, key, detail string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[class+"|"+key] {
		return false
	}
	l.seen[class+"|"+key] = true
	l.counts[class]++
	l.details = append(l.details, fmt.Sprintf("[%s] %s", class, detail))
	return true
}

func (l *ledger) count(class string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[class]
}

// acked counts the operations the provider acknowledged (distinct op ids).
func (l *ledger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := map[string]bool{}
	for _, o := range l.ops {
		if o.OpID != "" {
			ids[o.OpID] = true
		}
	}
	return len(ids)
}

// unsettled lists acknowledged operations without an outcome: every one
// must end reached, explained-failed, or as a counted violation.
func (l *ledger) unsettled() []opRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []opRecord
	for _, o := range l.ops {
		if o.OpID != "" && o.Outcome == "" {
			out = append(out, *o)
		}
	}
	return out
}

// outcomes tallies operation outcomes by kind for the summary.
func (l *ledger) outcomes() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, o := range l.ops {
		k := o.Outcome
		if i := strings.IndexByte(k, ':'); i >= 0 {
			k = k[:i]
		}
		n[o.Kind+"→"+k]++
	}
	keys := slices.Sorted(maps.Keys(n))
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return strings.Join(s, " ")
}
