// Package meta is what a domain records about its owner, in our own XML
// namespace inside the domain's <metadata> (NS): provider instance,
// machine id, operation id and, once configured, cluster binding, shard
// metadata, fence marks and the intent of a Delete begun on the domain
// (Metadata, Decode, MergeMarks, DeleteIntent); reading and
// writing that element on a domain (Read, Write); and the names derived
// from a machine: its domain (DomainName) and the volumes the domain owns
// (OverlayName, SeedName). It needs no Backend: only a domain handle.
package meta
