// Package admin serves libvirtprovider.admin.v1.AdminService, the operator's
// view of the provider (hosts, machines with their bookkeeping and history,
// fencing marks, a live watch), and the admin web page: on the same mux,
// listener and TLS as CapacityProvider (see server.Options.Mount), or alone
// on the --admin-addr listener (Only).
//
// Reads are open to whoever the listener lets in. Writes (release a FAILED
// machine, trigger a reconcile) destroy VMs, so they need both
// Options.AllowWrite (--admin-write) and a caller whose client certificate
// the TLS stack verified and whose names match Options.Clients
// (--admin-clients); an empty list allows nobody. WhoAmI tells a caller
// which it is. Every write attempt is logged with the caller's identity
// and counted per identity, allowed or not. Errors reach the wire only
// through convert.WireError, the module's one error→code mapping.
package admin
