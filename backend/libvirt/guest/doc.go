// Package guest is what the backend does with a machine's guest once its
// domain is located (Target): starting it again (Start), the operations
// through the qemu guest agent (Configure, Drain, Abandon, Addresses,
// Client) and the wait until it has booted (AwaitBootedRunning,
// WatchBoot, Status), over backend/guestagent and agentcmd's transport.
//
// It takes the located domain and the backend's configuration (Config),
// never the backend: locating the machine is the caller's (backend/libvirt,
// the façade), and every write of a domain's metadata checks again, in
// the same lookup, that the domain is ours (meta.ReadOwned).
//
// Files by step: start.go reads the domain (ours, running) and starts it
// again; metadata.go writes its metadata (marks before the work, the
// binding after); boot.go waits for the boot; guest.go builds the agent
// client; configure.go strings the steps together for Configure, Drain and
// Abandon. A Configure enters each of them at most twice.
package guest
