package soakkit

import (
	"strings"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// A Configure cut by a provider restart (SIGKILL, failover, a SIGTERM that
// outlived --shutdown-timeout) ends as its guest tells (issue 41,
// docs/reliability.md): rolled back to IDLE when its bootstrap hook never
// started, CONFIGURED when it finished ok, FAILED with the cause otherwise.
// The texts below are the provider's (server/lifecycle/resume).
const (
	// cutRolledBack starts the last_error of a rolled-back Configure.
	cutRolledBack = "configure rolled back to IDLE: cut by a provider restart before its bootstrap hook started"
	// cutFailed is in the last_error of every cut Configure that is FAILED.
	cutFailed = "interrupted by a provider restart"
	// cutOld is the cause of a backend that cannot ask its guest: no
	// longer a real cause where the guest keeps its trace.
	cutOld = "the bootstrap blob is never persisted"
)

// CutConfigureRolledBack says whether m is a machine whose Configure a
// provider restart cut before its bootstrap hook started, rolled back to
// IDLE.
func CutConfigureRolledBack(m *pb.Machine) bool {
	return m.GetState() == pb.MachineState_MACHINE_STATE_IDLE && strings.HasPrefix(m.GetLastError(), cutRolledBack)
}

// CutConfigureFailed says whether lastError is one of the causes a
// Configure cut by a restart may end FAILED with: its hook failed, or
// started and left no exit status, or the guest could not tell within
// --configure-timeout, or its domain is gone. The old blanket cause (the
// blob is never persisted) is not one.
func CutConfigureFailed(lastError string) bool {
	return strings.Contains(lastError, cutFailed) && !strings.Contains(lastError, cutOld)
}
