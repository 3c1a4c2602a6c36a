// Package admin serves libvirtprovider.admin.v1.AdminService, the operator's
// view of the provider (hosts, machines with their bookkeeping and history,
// fencing marks, a live watch), and the admin web page, on the same mux,
// listener and TLS as CapacityProvider (see server.Options.Mount).
//
// It is read-only unless Options.AllowWrite (--admin-write) is set; then it
// also releases FAILED machines and triggers reconciles. Every write attempt
// is logged and counted, allowed or not. Errors reach the wire only through
// server.WireError, the module's one error→code mapping.
package admin
