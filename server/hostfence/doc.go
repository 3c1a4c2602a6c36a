// Package hostfence declares a host down on its own, the way an operator
// would with `libvirtctl down`, but only on positive evidence: a host
// unreachable for --host-down-after has the operator's --fence-command run
// for it (an IPMI or Redfish power-off, a script that cuts the host off),
// and only when that command exits 0 is the host declared down (issue 38,
// docs/pools.md "One view of a zone").
//
// It never fences while no other host answers: then the likelier cause is
// the provider's own network, and powering off every host would cost every
// machine. A failed command is a WARN line and is tried again after
// --host-down-after; a declaration it made ends only with `libvirtctl up`.
package hostfence
