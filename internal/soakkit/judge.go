package soakkit

import (
	"fmt"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Judge files what became of each operation, the same way in every soak;
// the soak supplies its reads and what it alone knows (the real causes of
// a failure, the checks of a machine that reached its target).
type Judge struct {
	Led       *Ledger
	T0        time.Time
	Read      func(id string) (*pb.Machine, error)
	LastStart func() time.Time // the running provider's start
	Timeout   func(kind string) time.Duration
	Violate   func(class, key, what string, m *pb.Machine)
	Logf      func(format string, args ...any)
	// Explain names the real cause of a FAILED machine ("" when it has none:
	// a false FAILED).
	Explain func(op *OpRecord, m *pb.Machine) string
	// Reached checks a machine that reached op's target.
	Reached func(op *OpRecord, m *pb.Machine)
	// Elsewhere explains an operation that ended in another stable state
	// ("" when nothing does: unaccounted). Optional.
	Elsewhere func(op *OpRecord, m *pb.Machine) string
	// OnExplained runs when a FAILED state is judged to have a real cause.
	// Optional.
	OnExplained func(id string)
}

// Await polls the machine until the operation ends, and files the outcome:
// reached (checked), FAILED (judged), a Configure rolled back to IDLE after
// a provider restart cut it, another stable state (unaccounted unless
// Elsewhere explains it), or still transitional past its deadline (stuck). The deadline counts from the send or from the provider's last
// start, whichever is later, because a transition resumed after a restart
// gets a fresh one.
func (j *Judge) Await(op *OpRecord) {
	for {
		m, err := j.Read(op.Machine)
		if err != nil {
			j.Violate(ClOther, "await|"+op.Machine+"|"+err.Error(), fmt.Sprintf("waiting for %s of %s: %v", op.Kind, op.Machine, err), nil)
			j.Led.SetOutcome(op, "unreachable")
			return
		}
		st := m.GetState()
		switch {
		case st == op.Target:
			j.Reached(op, m)
			j.Led.SetOutcome(op, "reached")
			return
		case st == pb.MachineState_MACHINE_STATE_FAILED:
			j.Led.SetOutcome(op, j.Failed(op, m))
			return
		case !Transitional(st):
			if why := j.rolledBack(op, m); why != "" {
				j.Led.SetOutcome(op, why)
				return
			}
			if j.Elsewhere != nil {
				if why := j.Elsewhere(op, m); why != "" {
					j.Led.SetOutcome(op, why)
					return
				}
			}
			j.Violate(ClOther, "unaccounted|"+op.Machine+"|"+op.Sent.String(),
				fmt.Sprintf("%s of %s (op %q) ended %s, want %s", op.Kind, op.Machine, op.OpID, st, op.Target), m)
			j.Led.SetOutcome(op, "unaccounted")
			return
		}
		base := op.Sent
		if ls := j.LastStart(); ls.After(base) {
			base = ls
		}
		if budget := j.Timeout(op.Kind) + StuckGrace; time.Since(base) > budget {
			j.Violate(ClStuck, "stuck|"+op.Machine+"|"+op.Sent.String(),
				fmt.Sprintf("%s of %s (op %q) still %s %s after it was sent or resumed (timeout %s + %s grace)",
					op.Kind, op.Machine, op.OpID, st, time.Since(base).Round(time.Second), j.Timeout(op.Kind), StuckGrace), m)
			j.Led.SetOutcome(op, "stuck")
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// rolledBack explains a Configure that ended IDLE: a restart of the
// provider since it was sent cut it before its bootstrap hook started,
// and the provider rolled it back (CutConfigureRolledBack). "" otherwise.
func (j *Judge) rolledBack(op *OpRecord, m *pb.Machine) string {
	if op.Kind != "Configure" || !CutConfigureRolledBack(m) || !j.LastStart().After(op.Sent) {
		return ""
	}
	j.Logf("%s: Configure (op %q) rolled back to IDLE after a provider restart: %s", op.Machine, op.OpID, m.GetLastError())
	return "rolled-back: Configure cut by a restart before its bootstrap hook started"
}

// Failed decides whether a FAILED machine was failed by a real cause the
// contract allows, or by a transient fault (false_failed). It judges each
// FAILED state once; op is nil for a machine found FAILED between
// operations (e.g. by reconcile).
func (j *Judge) Failed(op *OpRecord, m *pb.Machine) string {
	id := m.GetId()
	if j.Led.IsClassified(id) {
		return "failed-explained: judged before"
	}
	j.Led.MarkClassified(id, true)
	if why := j.Explain(op, m); why != "" {
		j.Logf("%s FAILED with a real cause (%s): %s", id, why, m.GetLastError())
		if j.OnExplained != nil {
			j.OnExplained(id)
		}
		return "failed-explained: " + why
	}
	what := fmt.Sprintf("%s FAILED by a transient fault", id)
	if op != nil {
		what = fmt.Sprintf("%s of %s (op %q, sent at %.1fs) FAILED by a transient fault", op.Kind, id, op.OpID, op.Sent.Sub(j.T0).Seconds())
	}
	j.Violate(ClFalse, id+"|"+m.GetLastError()+"|"+time.Now().String(), what, m)
	return "false-failed"
}
