// Package hostconn is one libvirt host's connection: the only place that
// opens, watches and closes connections to libvirt daemons. The handles it
// hands out (virt.Conn, virt.Domain, virt.Pool, virt.Volume), libvirt's
// error codes and URI redaction live in the leaf package
// backend/libvirt/virt; Config.Dial lets tests wrap virt.Dial.
//
// A Host owns:
//   - the connection: dialled in the background, bounded (a host that is
//     down at start delays nothing: FirstAttempt, ErrHostConnecting),
//     re-dialled with capped exponential backoff after a loss seen by the
//     close callback, the watchdog (watch.go) or a failed call (observe);
//   - liveness: libvirt's keepalive where the client library has the fix
//     for CVE-2024-4418, else the watchdog's pings; TCP_USER_TIMEOUT and
//     TCP keepalive on the connection's socket either way (keepalive.go,
//     sockopt.go);
//   - the call bounds: every call through With or WithDomain runs within
//     --libvirt-call-timeout, at most MaxCallsPerHost inside libvirt at
//     once per connection and MaxThreadsPerHost over the host's
//     connections (bound.go, boundconn.go); one past it is a
//     *CallTimeoutError, transient, naming the host and the call; an
//     abandoned call that changes the host and succeeds late is reported
//     (late.go);
//   - the host's facts: the domain type chosen at connect (domaintype.go),
//     its size and versions (size.go), its QEMU log for a failed start
//     (qemulog.go).
//
// Its owner (backend/libvirt) learns what changes through three hooks,
// Config.OnConnected, Config.OnSize and Config.OnLateResult, and shows the host only by Where
// and Status: a URI is redacted (virt.Redact) and every error scrubbed of
// its secrets (virt.Scrub). The package knows nothing of domains' metadata,
// placement or the engine; it imports only backend, for the sentinel
// errors, and virt.
package hostconn
