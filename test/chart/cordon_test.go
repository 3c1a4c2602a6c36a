package chart

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// cordonFileSuffix is what admin.CordonFileFor adds to --state (this
// module does not import the provider's): the admin API's cordons live
// beside the state file.
const cordonFileSuffix = ".cordons.json"

// checkCordonFile: with --state, the cordon file beside it must survive a
// pod restart and be writable where it lies, since it is replaced by a
// temporary file renamed in its directory: that directory must be the
// mount of a PersistentVolumeClaim, not read-only. Without --state the
// cordons live in memory, like the state.
func checkCordonFile(t *testing.T, args map[string]string, mounts map[string]corev1.VolumeMount, vols map[string]corev1.Volume) {
	t.Helper()
	state, ok := args["state"]
	if !ok {
		return
	}
	dir := filepath.Dir(state + cordonFileSuffix)
	m, ok := mounts[dir]
	switch {
	case !ok:
		t.Errorf("the cordon file's directory %s is not a mount: cordons would be lost, or not written, on a read-only root", dir)
	case m.ReadOnly:
		t.Errorf("the cordon file's directory %s is mounted read-only: a cordon could not be saved", dir)
	case vols[m.Name].PersistentVolumeClaim == nil && args["leader-elect"] == "true" && vols[m.Name].EmptyDir != nil:
		// Under leader election the state and cordon files are per pod
		// and do not follow a failover (docs/ha.md, "Not yet done").
	case vols[m.Name].PersistentVolumeClaim == nil:
		t.Errorf("the cordon file's directory %s is volume %s, not a PersistentVolumeClaim: cordons would not survive a restart", dir, m.Name)
	}
}
