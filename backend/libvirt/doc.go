// Package libvirt is the libvirt substrate of the capacity provider: it
// implements backend.Backend (and backend.ZoneReadiness) over one libvirt
// connection per host (backend/libvirt/hostconn), where each host serves
// one zone.
//
// What it does on a host:
//   - Create: a copy-on-write overlay volume on the golden image (its
//     backing format read from the image's volume XML), an optional NoCloud
//     seed volume, a domain defined from typed XML (libvirtxml, built section
//     by section) with the qemu-guest-agent channel, then start and wait
//     until running. The domain name is derived from the provider id and the
//     machine id (meta.DomainName), so a retried Create finds its own domain; a
//     domain with that name whose metadata names someone else is never
//     touched (backend.ErrNotOurs). A failed Create removes only what that
//     attempt made.
//   - Configure and Drain run the image's hooks through backend/guestagent
//     over agentcmd.Transport (virDomainQemuAgentCommand); the cluster
//     binding is written to the domain metadata only after the hooks
//     succeeded, and cleared after a drain.
//   - Delete destroys, undefines (with managed save, snapshot, checkpoint and
//     NVRAM metadata) and deletes the overlay and seed volumes, never the
//     golden image, and only for a domain whose metadata says it is ours.
//   - Inventory and Hosts list each host in parallel under a per-host timeout.
//
// Ownership lives in the domain metadata, in our own XML namespace
// (meta.NS): provider instance, machine id, operation id and, once
// configured, cluster id and shard metadata (meta.Metadata). Bindings can thus be
// rebuilt from libvirt alone.
//
// Connections are hostconn's: connect, liveness, reconnect with backoff,
// the bound of every call and the host's facts (domain type, size,
// versions). The backend holds one hostconn.Host per host and uses it
// through With and WithDomain, Ready, Where, Status and Versions; it
// learns of a host going up or down and of its size through hooks that
// feed placement. A host that is down does not stop the others: its zone
// reports backend.ErrHostUnavailable until it is back.
//
// Its leaves live in sub-packages that need no Backend: domxml (domain
// XML and the definition allow-list), meta (domain metadata and names),
// volume (golden image, overlay, seed and plain volumes), config (the
// configuration and the URI allow-list), shape (what a host offers the
// instance types' shapes), domstate (domain state names, waiting to run),
// agentcmd (the guest agent's transport over libvirt), recovery (which
// copy an interrupted migration left is the machine) and hostconn (one
// host's connection). Live migration (migrate*.go) stays here: it needs the
// backend's ownership check, placement bookings, seed rebuilding, volume
// deletion through a host's connection, rollback and the Create policy,
// so an interface for it would be as wide as Backend itself.
//
// Security: weak transports (qemu+tcp, SSH without host key checking, any
// no_verify) are refused at startup, and URIs are shown only redacted (no
// userinfo, no query string) in logs, errors and HostStatus.
package libvirt
