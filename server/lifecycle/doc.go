// Package lifecycle is the proto-free engine behind BigFleet's
// CapacityProvider contract: the state machine, fencing, idempotency, async
// transitions with timeouts, and the revision index behind incremental List.
//
// Handlers translate wire messages into the request types here and map the
// *Error values back to wire codes in exactly one place (package server).
package lifecycle
