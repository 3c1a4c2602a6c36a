// Package record holds what the lifecycle engine keeps about a machine: the
// Machine record and its history, the fencing token and marks, the engine's
// request and answer types, the *Error every refusal carries, the request
// caps and their checks, and the Store contract the durable store fulfils.
// It knows nothing of the engine, the backend's calls or the wire.
package record
