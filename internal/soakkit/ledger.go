package soakkit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// The invariant classes both soaks count, plus "other" for what a closing
// line has no column for (an unexpected RPC code, an acknowledged operation
// that ended somewhere the soak cannot explain, a SIGTERM ignored).
const (
	ClOrphan   = "orphans"
	ClBinding  = "lost_bindings"
	ClFalse    = "false_failed"
	ClStuck    = "stuck"
	ClOther    = "other"
	StuckGrace = 45 * time.Second // reconcile period + commit + scheduling on a busy 2-core host
)

// FaultKind names one kind of injected fault.
type FaultKind string

// OpRecord is one mutation a client sent and what became of it.
type OpRecord struct {
	Client, Machine, Kind string
	Target                pb.MachineState
	Cluster               string // Configure only
	OpID                  string // "" when no attempt was acknowledged
	Sent, Acked, Ended    time.Time
	Outcome               string
	// Epoch and Seq are the token of the acknowledged attempt.
	Epoch, Seq int64
}

// FaultEvent is one injected fault, with what a soak needs to judge the
// failures around it.
type FaultEvent struct {
	Kind       FaultKind
	Host       string // the lab host it hit ("" for the provider or the local host)
	Start, End time.Time
	Note       string
	// CutShort: a SIGTERM'd provider that needed its whole --shutdown-timeout
	// (or had to be SIGKILLed) may have cut in-flight work short.
	CutShort bool
}

// Binding is what a client last asked a machine to be bound to.
type Binding struct {
	Cluster string
	Meta    map[string]string
}

// Ledger keeps everything the checks compare against, behind one mutex.
type Ledger struct {
	mu         sync.Mutex
	ops        []*OpRecord
	faults     []*FaultEvent      // End is zero while the fault is under way
	sent       map[string]Binding // machine → last Configure sent
	classified map[string]bool    // machine → its current FAILED state is already judged
	seen       map[string]bool    // violation keys, so a lasting problem counts once
	counts     map[string]int
	details    []string
}

// NewLedger is an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{sent: map[string]Binding{}, classified: map[string]bool{}, seen: map[string]bool{},
		counts: map[string]int{}}
}

// AddOp records a mutation.
func (l *Ledger) AddOp(o *OpRecord) {
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

// PreviousSent is when the last mutation of machine sent before t was
// sent (t itself when there is none): what a client believed of the
// machine when it sent at t dates from then.
func (l *Ledger) PreviousSent(machine string, t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.ops) - 1; i >= 0; i-- {
		if o := l.ops[i]; o.Machine == machine && o.Sent.Before(t) {
			return o.Sent
		}
	}
	return t
}

// SetOutcome files what became of a mutation.
func (l *Ledger) SetOutcome(o *OpRecord, outcome string) {
	l.mu.Lock()
	o.Outcome, o.Ended = outcome, time.Now()
	l.mu.Unlock()
}

// SetSent records the binding a Configure asked for.
func (l *Ledger) SetSent(id string, b Binding) {
	l.mu.Lock()
	l.sent[id] = b
	l.mu.Unlock()
}

// SentTo is the binding the last Configure of id asked for.
func (l *Ledger) SentTo(id string) (Binding, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.sent[id]
	return b, ok
}

// MarkClassified says the machine's current FAILED state is judged (or not).
func (l *Ledger) MarkClassified(id string, v bool) {
	l.mu.Lock()
	l.classified[id] = v
	l.mu.Unlock()
}

// IsClassified says whether the machine's current FAILED state is judged.
func (l *Ledger) IsClassified(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.classified[id]
}

// BeginFault records a fault before it is injected: a failure it causes
// may be judged while the injection is still under way (a provider SIGKILL
// mid-Configure is judged as soon as the restarted provider answers).
func (l *Ledger) BeginFault(kind FaultKind, host string) *FaultEvent {
	ev := &FaultEvent{Kind: kind, Host: host, Start: time.Now()}
	l.AddFault(ev)
	return ev
}

// AddFault records a fault as it is.
func (l *Ledger) AddFault(ev *FaultEvent) {
	l.mu.Lock()
	l.faults = append(l.faults, ev)
	l.mu.Unlock()
}

// EditFault changes a recorded fault under the ledger's lock.
func (l *Ledger) EditFault(ev *FaultEvent, edit func(*FaultEvent)) {
	l.mu.Lock()
	edit(ev)
	l.mu.Unlock()
}

// FaultsBetween returns the faults of kind that overlapped [from, to].
func (l *Ledger) FaultsBetween(kind FaultKind, from, to time.Time) []FaultEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []FaultEvent
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

// FaultCounts tallies the recorded faults by kind, "kind=n" sorted by kind.
func (l *Ledger) FaultCounts() (int, string) {
	l.mu.Lock()
	n := map[string]int{}
	for _, f := range l.faults {
		n[string(f.Kind)]++
	}
	total := len(l.faults)
	l.mu.Unlock()
	return total, tally(n)
}

// RecentFaults describes the faults of the last window, for violation details.
func (l *Ledger) RecentFaults(at time.Time, window time.Duration, t0 time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, f := range l.faults {
		end := f.End
		if end.IsZero() {
			end = at
		}
		if end.After(at.Add(-window)) && !f.Start.After(at) {
			where := ""
			if f.Host != "" {
				where = " " + f.Host
			}
			s = append(s, fmt.Sprintf("%s%s@%.1fs-%.1fs(%s)", f.Kind, where, f.Start.Sub(t0).Seconds(), end.Sub(t0).Seconds(), f.Note))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Violate records one violation; key makes a lasting problem count once.
// It says whether the violation is new.
func (l *Ledger) Violate(class, key, detail string) bool {
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

// Count is the number of violations of class.
func (l *Ledger) Count(class string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[class]
}

// Details lists every violation with its detail, in the order found.
func (l *Ledger) Details() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.details)
}

// Acked counts the operations the provider acknowledged (distinct op ids).
func (l *Ledger) Acked() int {
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

// Unsettled lists acknowledged operations without an outcome: every one
// must end reached, explained-failed, or as a counted violation.
func (l *Ledger) Unsettled() []OpRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []OpRecord
	for _, o := range l.ops {
		if o.OpID != "" && o.Outcome == "" {
			out = append(out, *o)
		}
	}
	return out
}

// LastReached is the last operation of client on machine that reached its
// target, among kinds (nil when there is none).
func (l *Ledger) LastReached(client, machine string, kinds ...string) *OpRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.ops) - 1; i >= 0; i-- {
		o := l.ops[i]
		if o.Client == client && o.Machine == machine && o.Outcome == "reached" && slices.Contains(kinds, o.Kind) {
			c := *o
			return &c
		}
	}
	return nil
}

// Outcomes tallies operation outcomes by kind for the summary.
func (l *Ledger) Outcomes() string {
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
	return tally(n)
}

// OpsByKind counts the acknowledged operations by kind.
func (l *Ledger) OpsByKind() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, o := range l.ops {
		if o.OpID != "" {
			n[o.Kind]++
		}
	}
	return tally(n)
}

func tally(n map[string]int) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		s = append(s, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return strings.Join(s, " ")
}

// Explain is a violation's detail, with what an engineer needs to chase
// it: the machine as the provider shows it (m may be nil), the faults of
// the minute before (times from t0), and the provider's log lines about
// that machine.
func (l *Ledger) Explain(what string, m *pb.Machine, t0 time.Time, pr *Proc) string {
	detail := what
	if m != nil {
		detail += fmt.Sprintf("\n    machine %s state=%s last_error=%q host=%s cluster=%q",
			m.GetId(), m.GetState(), m.GetLastError(), m.GetHost().GetRef(), m.GetCluster())
	}
	now := time.Now()
	detail += fmt.Sprintf("\n    at %.1fs; faults in the minute before: %s", now.Sub(t0).Seconds(),
		l.RecentFaults(now, time.Minute, t0))
	if m != nil {
		detail += "\n    provider log about it:\n" + pr.Tail(12, m.GetId())
	}
	return detail
}
