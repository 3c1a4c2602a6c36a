package guest

import (
	"errors"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
)

// The soak-lab findings of issue 31: a Configure accepted while the
// restarted provider's domain was still "paused (starting up)", and a
// Drain sent while an interrupted migration left its source "paused
// (migrating)", both went FAILED. Such a domain is in passage: the call
// is retried within its deadline; a domain stopped for good is not.
func TestNotRunningInPassageIsTransient(t *testing.T) {
	cases := []struct {
		name      string
		st        libvirt.DomainState
		reason    int
		running   bool
		transient bool
	}{
		{"running", libvirt.DOMAIN_RUNNING, int(libvirt.DOMAIN_RUNNING_BOOTED), true, false},
		{"starting up", libvirt.DOMAIN_PAUSED, int(libvirt.DOMAIN_PAUSED_STARTING_UP), false, true},
		{"migrating", libvirt.DOMAIN_PAUSED, int(libvirt.DOMAIN_PAUSED_MIGRATION), false, true},
		{"paused by a user", libvirt.DOMAIN_PAUSED, int(libvirt.DOMAIN_PAUSED_USER), false, false},
		{"I/O error", libvirt.DOMAIN_PAUSED, int(libvirt.DOMAIN_PAUSED_IOERROR), false, false},
		{"shut off", libvirt.DOMAIN_SHUTOFF, int(libvirt.DOMAIN_SHUTOFF_SHUTDOWN), false, false},
		{"crashed", libvirt.DOMAIN_CRASHED, 0, false, false},
	}
	for _, c := range cases {
		err := notRunning("d", c.st, c.reason)
		if c.running {
			if err != nil {
				t.Errorf("%s: %v, want nil", c.name, err)
			}
			continue
		}
		if !errors.Is(err, backend.ErrNotRunning) {
			t.Errorf("%s: %v, want ErrNotRunning", c.name, err)
		}
		if got := backend.IsTransient(err); got != c.transient {
			t.Errorf("%s: transient = %v, want %v (%v)", c.name, got, c.transient, err)
		}
	}
}
