// Package convert turns the engine's words into the wire's: a record into a
// bigfleet.v1alpha1.Machine (MachineToProto) and any error into the
// *connect.Error sent to the client (WireError, the module's one error →
// code table). Both the CapacityProvider handlers (server) and the admin
// API (server/admin) use it, so a machine and a refusal read the same on
// both; it lives below them so that neither sub-package imports its parent.
package convert
