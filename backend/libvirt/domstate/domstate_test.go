package domstate

import (
	"testing"

	"libvirt.org/go/libvirt"
)

func TestRunStateNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		st     libvirt.DomainState
		reason int
		want   string
	}{
		{libvirt.DOMAIN_SHUTOFF, int(libvirt.DOMAIN_SHUTOFF_CRASHED), "shut off (crashed)"},
		{libvirt.DOMAIN_SHUTOFF, int(libvirt.DOMAIN_SHUTOFF_SHUTDOWN), "shut off (shutdown)"},
		{libvirt.DOMAIN_CRASHED, int(libvirt.DOMAIN_CRASHED_PANICKED), "crashed (panicked)"},
		{libvirt.DOMAIN_PAUSED, int(libvirt.DOMAIN_PAUSED_IOERROR), "paused (I/O error)"},
		{libvirt.DOMAIN_RUNNING, int(libvirt.DOMAIN_RUNNING_BOOTED), "running (booted)"},
		{libvirt.DOMAIN_SHUTOFF, 99, "shut off"}, // a reason newer than this table
	} {
		if got := Run(c.st, c.reason).String(); got != c.want {
			t.Errorf("state %d reason %d: %q, want %q", c.st, c.reason, got, c.want)
		}
	}
}
