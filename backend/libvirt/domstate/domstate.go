// Package domstate names a libvirt domain's state and libvirt's reason
// for it (in virsh's words, as backend.RunState), and waits for a domain
// to run. It needs no Backend.
package domstate

import (
	"context"
	"fmt"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/internal/backoff"
)

// Run names a domain's state and libvirt's reason for it, in the
// words virsh domstate --reason uses.
func Run(st libvirt.DomainState, reason int) backend.RunState {
	name, reasons := names(st)
	r := "unknown"
	if reason >= 0 && reason < len(reasons) {
		r = reasons[reason]
	}
	return backend.RunState{State: name, Reason: r}
}

// InPassage reports a domain paused only on its way somewhere: QEMU still
// starting up, or the source of a live migration (a crash of the provider
// can leave either for a reconcile pass to finish or recover). It is not
// a stopped guest: a call that needs the guest waits for it.
func InPassage(st libvirt.DomainState, reason int) bool {
	return st == libvirt.DOMAIN_PAUSED &&
		(reason == int(libvirt.DOMAIN_PAUSED_STARTING_UP) || reason == int(libvirt.DOMAIN_PAUSED_MIGRATION))
}

// names maps a state to its name and its reasons, indexed by
// libvirt's virDomain<State>Reason values.
func names(st libvirt.DomainState) (string, []string) {
	switch st {
	case libvirt.DOMAIN_RUNNING:
		return backend.RunRunning, []string{"unknown", "booted", "migrated", "restored", "from snapshot",
			"unpaused", "migration canceled", "save canceled", "event wakeup", "crashed", "post-copy", "post-copy failed"}
	case libvirt.DOMAIN_BLOCKED:
		return backend.RunBlocked, []string{"unknown"}
	case libvirt.DOMAIN_PAUSED:
		return backend.RunPaused, []string{"unknown", "user", "migrating", "saving", "dumping", "I/O error",
			"watchdog", "from snapshot", "shutting down", "creating snapshot", "crashed", "starting up",
			"post-copy", "post-copy failed", "api error"}
	case libvirt.DOMAIN_SHUTDOWN:
		return backend.RunShutdown, []string{"unknown", "user"}
	case libvirt.DOMAIN_SHUTOFF:
		return backend.RunShutoff, []string{"unknown", "shutdown", "destroyed", "crashed", "migrated",
			"saved", "failed", "from snapshot", "daemon"}
	case libvirt.DOMAIN_CRASHED:
		return backend.RunCrashed, []string{"unknown", "panicked"}
	case libvirt.DOMAIN_PMSUSPENDED:
		return backend.RunSuspended, []string{"unknown"}
	}
	return backend.RunNoState, []string{"unknown"}
}

// Running: the VM exists as a process (paused or blocked still counts).
func Running(st libvirt.DomainState) bool {
	switch st {
	case libvirt.DOMAIN_RUNNING, libvirt.DOMAIN_BLOCKED, libvirt.DOMAIN_PAUSED:
		return true
	}
	return false
}

// WaitRunning polls the domain state with backoff until it runs or ctx ends.
func WaitRunning(ctx context.Context, dom virt.Domain) error {
	delay := backoff.New(20*time.Millisecond, time.Second)
	for {
		st, reason, err := dom.GetState()
		if err != nil {
			return err
		}
		if st == libvirt.DOMAIN_RUNNING {
			return nil
		}
		if st == libvirt.DOMAIN_SHUTOFF || st == libvirt.DOMAIN_CRASHED {
			return fmt.Errorf("domain stopped while starting (%s)", StopReason(st, reason))
		}
		if err := delay.Wait(ctx); err != nil {
			return err
		}
	}
}

// StopReason names why a domain is off, in libvirt's words.
func StopReason(st libvirt.DomainState, reason int) string {
	if st == libvirt.DOMAIN_CRASHED {
		return "crashed"
	}
	switch libvirt.DomainShutoffReason(reason) {
	case libvirt.DOMAIN_SHUTOFF_FAILED:
		return "shut off: failed to start"
	case libvirt.DOMAIN_SHUTOFF_CRASHED:
		return "shut off: crashed"
	case libvirt.DOMAIN_SHUTOFF_SHUTDOWN:
		return "shut off: the guest powered off"
	case libvirt.DOMAIN_SHUTOFF_DESTROYED:
		return "shut off: destroyed"
	}
	return fmt.Sprintf("shut off, reason %d", reason)
}

// Describe words a state that is not running for an error ("domain x
// is paused", "is shut off: destroyed").
func Describe(st libvirt.DomainState, reason int) string {
	switch st {
	case libvirt.DOMAIN_PAUSED:
		return "paused"
	case libvirt.DOMAIN_SHUTOFF, libvirt.DOMAIN_CRASHED:
		return StopReason(st, reason)
	}
	return fmt.Sprintf("in state %d", st)
}
