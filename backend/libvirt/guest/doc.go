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
package guest
