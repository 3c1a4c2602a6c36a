// Package fake is an in-memory backend.Backend for development, tests and
// the conformance mode (--use-fake-backend). VMs are map entries; nothing
// boots. It logs nothing itself: the caller is the one that warns an
// operator that this is not for production.
//
// Tests steer it through Options and the control methods (SetFailure,
// SetHang, SetDelay, SetZoneDown, Vanish, SetRunState) and inspect it with VM, Binding
// and Calls. It keeps only a sha256 of bootstrap blobs, never the bytes, so
// it cannot become the place a secret leaks from.
package fake
