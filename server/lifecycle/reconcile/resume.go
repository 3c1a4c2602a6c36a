package reconcile

import (
	"fmt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A Delete (or Release) records its intent on the domain before it
// destroys anything (backend.Observed.DeleteOperationID). A SPECULATIVE
// record that is not a Delete's (a seed, or a record rebuilt after a lost
// state file) whose domain carries that intent is a Delete cut short and
// then forgotten: BigFleet was told the machine is going, so adopting the
// domain would bring it back IDLE (issue 38 case 6). Instead the record
// takes the Delete over at once, before its zone is marked listed (so no
// mutation sees the machine as a plain seed), and the Delete is resumed
// through the machine's call gate. The intent itself is proof enough: no
// wait for the zone's other hosts, as a leftover copy needs.

// Outcomes of a Delete found begun on a domain, in history entries.
const (
	OutcomeDeleteResumed      = "delete_resumed"
	OutcomeDeleteFinished     = "delete_finished"
	OutcomeDeleteResumeFailed = "delete_resume_failed"
)

// resumeDelete takes over the Delete whose intent o carries for the
// SPECULATIVE record m and queues the Delete itself. Should the Delete
// fail, the record is the Delete's by then: the next pass finds the
// domain as a deleted machine's leftover and removes it (waiting.go).
func (p *pass) resumeDelete(m *record.Machine, o backend.Observed) {
	r := p.r
	n, ok := r.takeOverDelete(m, o)
	if !ok {
		return
	}
	p.queueDelete(n, o, r.recordResumed)
}

// takeOverDelete makes m the record of the Delete o carries: still
// SPECULATIVE, with that Delete's operation id (a retried Delete from
// BigFleet is then acknowledged as the one it sent), and a history entry
// and WARN line saying the domain was not adopted.
func (r *Reconciler) takeOverDelete(m *record.Machine, o backend.Observed) (*record.Machine, bool) {
	stillSeed := record.Expect{OperationID: m.OperationID, Holds: func(cur *record.Machine) bool {
		return cur.State == record.Speculative && !deleted(cur)
	}}
	note := fmt.Sprintf("domain %s on host %s carries the intent of Delete %s, begun before the state was lost: resumed, not adopted",
		o.Placement.Domain, o.Placement.Host, o.DeleteOperationID)
	n, err := r.eng.Update(m.ID, stillSeed, func(cur, n *record.Machine) error {
		now := r.cfg.Now()
		n.OperationID, n.OpKind = o.DeleteOperationID, record.OpDelete
		n.History = record.AppendHistory(n.History, record.Transition{OperationID: n.OperationID, Kind: record.OpDelete,
			From: cur.State, To: record.Speculative, Started: now, Ended: now, Outcome: OutcomeDeleteResumed, Note: note})
		return nil
	})
	if err != nil {
		r.log.Warn("reconcile: a Delete found begun on a domain not taken over; judged again next pass", "machine", m.ID,
			"zone", m.Zone, "host", o.Placement.Host, "domain", o.Placement.Domain, "op", o.DeleteOperationID, "err", err)
		return nil, false
	}
	r.log.Warn("reconcile: a Delete begun before the state was lost resumed; domain not adopted", "machine", m.ID,
		"zone", m.Zone, "host", o.Placement.Host, "domain", o.Placement.Domain, "op", o.DeleteOperationID)
	return n, true
}

// recordResumed adds the resumed Delete's end to the history, with the
// cause when it failed (retried next pass as a leftover).
func (r *Reconciler) recordResumed(n *record.Machine, o backend.Observed, delErr error) {
	if delErr == nil {
		r.log.Info("reconcile: resumed Delete finished", "machine", n.ID, "zone", n.Zone,
			"host", o.Placement.Host, "domain", o.Placement.Domain, "op", n.OperationID)
		r.noteHistory(n, OutcomeDeleteFinished, fmt.Sprintf("domain %s on host %s removed", o.Placement.Domain, o.Placement.Host))
		return
	}
	r.log.Warn("reconcile: resumed Delete failed; retried next pass", "machine", n.ID, "zone", n.Zone,
		"host", o.Placement.Host, "domain", o.Placement.Domain, "op", n.OperationID, "err", delErr)
	_, _ = r.eng.Update(n.ID, record.Expect{OperationID: n.OperationID}, func(cur, next *record.Machine) error {
		now := r.cfg.Now()
		next.History = record.AppendHistory(next.History, record.Transition{OperationID: next.OperationID, Kind: record.OpDelete,
			From: cur.State, To: cur.State, Started: now, Ended: now, Outcome: OutcomeDeleteResumeFailed,
			LastError: delErr.Error(), Note: fmt.Sprintf("domain %s on host %s not removed yet", o.Placement.Domain, o.Placement.Host)})
		return nil
	})
}
