// Package virt is the provider's cgo boundary with libvirt, without the
// connection's life: the handles the backend uses (Conn, Domain, Pool,
// Volume: the methods it calls, nothing more, over the Go bindings; Dial
// opens a real connection), the classification of libvirt's errors (Code,
// IsCode, Message) and the redaction of a host's URI (Redact, Scrub).
//
// It is a leaf: the packages that only use handles (meta, volume,
// domstate, agentcmd) import it instead of hostconn, which keeps one
// host's connection (dial, reconnect, call bounds) on top of it.
package virt
