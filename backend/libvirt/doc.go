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
//   - Configure and Drain (backend/libvirt/guest) run the image's hooks
//     through backend/guestagent over agentcmd.Transport
//     (virDomainQemuAgentCommand); the cluster binding is written to the
//     domain metadata only after the hooks succeeded, and cleared after a
//     drain.
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
// versions); the handles are virt's. The backend holds one hostconn.Host
// per host and uses it through With and WithDomain, Ready, Where, Status and Versions; it
// learns of a host going up or down and of its size through hooks that
// feed placement. A host that is down does not stop the others: its zone
// reports backend.ErrHostUnavailable until it is back.
//
// It is a façade: each method locates the machine once (the locator,
// hosts.go: which host, which domain, whether the host is declared down)
// and hands the located domain down. Create's libvirt work is the
// builder's (create.go), a Delete's removal on a host the remover's
// (delete.go), a listing and a host's status the lister's (inventory.go).
// The operations that need no Backend live in sub-packages, which never
// import it: guest (start again, Configure, Drain, the boot wait, on a
// guest.Target), migrate (live migration between two migrate.Ends, and
// reading an interrupted one), rollback (an attempt's undo stack), domxml
// (domain XML and the definition allow-list), meta (domain metadata,
// ownership and names), volume (golden image, overlay, seed and plain
// volumes, the configured pool), config (the configuration and the URI
// allow-list), shape (what a host offers the instance types' shapes),
// domstate (domain state names, waiting to run), agentcmd (the guest
// agent's transport over libvirt), recovery (which copy an interrupted
// migration left is the machine), guestfit (whether a host's QEMU can run
// a migrated guest), hostconn (one host's connection) and virt (the cgo
// handles, libvirt's error codes, URI redaction).
//
// Security: weak transports (qemu+tcp, SSH without host key checking, any
// no_verify) are refused at startup, and URIs are shown only redacted (no
// userinfo, no query string) in logs, errors and HostStatus.
package libvirt
