// Package intents is the leader's shared journal under --leader-elect
// (docs/ha.md, "The journal"): what the old leader accepted that the hosts
// cannot hold, kept in one Kubernetes ConfigMap so the replica that takes
// over starts from it. It holds the machines in a transitional state (a
// Create acknowledged before its domain is defined, a Configure, Drain or
// Delete that left no trace on its domain yet), every fence mark, and the
// admin API's cordon and down files.
//
// Store wraps the engine's local store (record.Store): a Commit that
// changes what the journal holds returns only once the ConfigMap says so,
// so nothing is acknowledged that a failover could lose. Writes are
// optimistic (resourceVersion) and coalesced: commits that arrive while a
// write is in flight share the next one. A failed or conflicting write
// fails every commit it carried; the journal is left as it was.
//
// Journal is the ConfigMap itself: read, claim (the new leader stamps
// itself as the writer, so a late write of the old leader conflicts),
// write. It knows nothing of the engine.
package intents
