// Command libvirtctl is the operator's client of a running provider: it
// lists and inspects machines, hosts and fencing marks and watches changes
// through the admin API (libvirtprovider.admin.v1), drives the lifecycle
// calls of BigFleet's CapacityProvider (create, configure, drain, delete,
// with fencing tokens), and runs the admin writes (release, reconcile,
// cordon and uncordon a host, declare a host down and up again, migrate
// a machine to another host; drain-list shows what must move off one).
// It uses the generated connect-go clients and speaks gRPC, Connect or
// gRPC-Web, in plaintext HTTP/2 (h2c) or over TLS/mTLS.
//
//	libvirtctl [global flags] COMMAND [flags] [ID]
//
// Run `libvirtctl help` for the commands and flags.
package main
