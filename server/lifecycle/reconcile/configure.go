package reconcile

import (
	"fmt"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A Configure records its intent on the domain before its bootstrap hook
// may start (backend.Observed.Configure) and removes it with the binding
// or its rollback. A SPECULATIVE record that is not a Delete's (a seed,
// or a record rebuilt after a lost state file, a failover's included)
// whose domain carries that intent is a Configure cut short and then
// forgotten: adopting the domain IDLE would hand out a machine whose
// node may have joined a cluster. Instead the record becomes that
// Configure's, CONFIGURING with its operation id, cluster and shard
// metadata, before its zone is marked listed, and the engine ends it as
// the guest tells (package resume), exactly as after a restart that kept
// the state file. A Delete's intent on the same domain comes first.

// OutcomeConfigureResumed is the history note of a Configure found cut
// on a domain and resumed; its entry ends as the resume decides.
const OutcomeConfigureResumed = "configure_resumed"

// resumesConfigure reports whether a SPECULATIVE record finding copy o
// takes over o's Configure: only with a backend that can ask the guest.
func (r *Reconciler) resumesConfigure(o backend.Observed) bool {
	return o.Configure.Begun() && r.can.ConfigureProber != nil
}

// takeOverConfigure makes n, the next version of the SPECULATIVE record
// cur, the cut Configure that o carries: CONFIGURING on o's domain, with
// a fresh deadline (the sweep leaves it to its resume) and a running
// history entry the resume's end completes.
func (r *Reconciler) takeOverConfigure(cur, n *record.Machine, o backend.Observed, now time.Time) {
	c := o.Configure
	n.State, n.OpKind, n.OperationID = record.Configuring, record.OpConfigure, c.OperationID
	n.Cluster, n.ShardMetadata = c.ClusterID, record.CloneMap(c.ShardMetadata)
	n.Domain, n.HostName = o.Placement.Domain, o.Placement.Host
	n.Host = record.HostRef{Provider: r.cfg.Provider, Ref: o.Placement.Ref()}
	n.OpDeadline = now.Add(r.cfg.ConfigureTimeout)
	n.LastError = ""
	n.History = record.AppendHistory(n.History, record.Transition{OperationID: c.OperationID, Kind: record.OpConfigure,
		From: cur.State, To: record.Configuring, Started: now, Outcome: "running",
		Note: fmt.Sprintf("%s: domain %s on host %s carries the intent of Configure %s (cluster %q), begun before the state was lost: resumed as its guest tells, not adopted IDLE",
			OutcomeConfigureResumed, o.Placement.Domain, o.Placement.Host, c.OperationID, c.ClusterID)})
}
