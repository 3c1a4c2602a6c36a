// Package soakkit is what the chaos soaks share: the local soak of issue 10
// (test/soak, one libvirtd on this machine) and the lab soak of issue 31
// (test/soaklab, remote lab hosts). It holds the ledger that records every
// operation, fault and violation, the provider process the soaks kill and
// restart, BigFleet's retry of a mutation, and the PKI of BigFleet-like
// callers. Test support only: nothing in the provider imports it.
package soakkit
