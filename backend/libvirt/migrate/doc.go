// Package migrate is live migration between two hosts of a zone: a
// managed virDomainMigrate3 from the source's connection to the
// destination's, both held by this process (Mover.Move); which hosts can
// run the guest at all (GuestOn, Mover.Refused); the allow-list the
// source's and the destination's XML pass (policy.go); the destination's
// leftovers of an earlier attempt (leftover.go); and reading and resuming
// the copies an interrupted migration left (ReadCopy, Resume).
//
// It takes the located hosts (End) and the backend's configuration
// (Mover), never the backend: booking the destination, releasing the
// source's booking and remembering a leftover to sweep are the caller's
// (backend/libvirt's Migrate and RecoverMigration). See docs/pools.md
// "Live migration".
package migrate
