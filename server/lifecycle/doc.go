// Package lifecycle is the proto-free engine behind BigFleet's
// CapacityProvider contract: the accept path of the mutating RPCs (the
// state machine, fencing, idempotency), the transition runner (async
// transitions with timeouts, retries and the sweep), live migration, and
// the one way to change a record (update).
//
// Handlers translate wire messages into the request types here and map the
// *Error values back to wire codes in exactly one place (package server).
//
// Its rooms, each with one job:
//
//   - record: the Machine record and its history, tokens and marks, the
//     request and answer types, *Error, the request caps, the Store
//     contract. Callers (server, server/admin, server/store, cmd) import
//     record, index and fence directly; there are no aliases here.
//   - index: the read model (published records, the revision log and its
//     cursors, counts, watchers, map interning). It never calls the engine.
//   - fence: the fencing rule and the mark tables.
//   - serial: per-machine serialisation (the id lock, the backend call
//     gate, live runs, migration holds).
//   - caps: the backend's optional features, asked once in New.
//   - reconcile: the reconcile pass (listings, adoption, duplicates,
//     migration recovery, stopped domains and restart backoff) and the
//     zones listed since start. It sees the engine through the six-method
//     reconcile.Engine (reconcileView in reconciler.go): records are read
//     with Get and changed only through Update, backend calls on a machine
//     go through EnterCall.
//
// Nothing below imports lifecycle; record imports nothing of the others.
package lifecycle
