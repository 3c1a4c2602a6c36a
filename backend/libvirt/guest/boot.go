package guest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// boots is the runtime view of the guests that are booting (or whose boot
// after a restart failed), by machine id, for BootStatus; and the
// background checks of restarted guests, so a later wait on the same
// machine (a Configure, a Create) or Close stops them. Nothing of it is
// persisted: after a provider restart a Configure still checks the boot
// itself.
type boots struct {
	mu      sync.Mutex
	status  map[string]bootEntry
	gen     uint64
	watches map[string]context.CancelFunc
	once    sync.Once // the INFO about an image with no booted check
	stop    context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// bootEntry is one machine's status and the wait that owns it: a wait
// that ends changes the entry only if no newer wait took it over.
type bootEntry struct {
	backend.BootStatus
	gen uint64
}

func newBoots() *boots {
	ctx, cancel := context.WithCancel(context.Background())
	return &boots{status: map[string]bootEntry{}, watches: map[string]context.CancelFunc{}, stop: ctx, cancel: cancel}
}

// begin makes a new wait the owner of id's entry ("booting", reason).
func (bs *boots) begin(id, reason string) uint64 {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.gen++
	since := time.Now()
	if old, ok := bs.status[id]; ok && old.Phase == backend.BootBooting {
		since = old.Since // one boot, however many waits look at it
	}
	bs.status[id] = bootEntry{backend.BootStatus{Phase: backend.BootBooting, Reason: reason, Since: since}, bs.gen}
	return bs.gen
}

// update sets id's entry if the wait gen still owns it; phase "" clears it.
func (bs *boots) update(id string, gen uint64, phase, reason string) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	old, ok := bs.status[id]
	if !ok || old.gen != gen {
		return
	}
	switch {
	case phase == "":
		delete(bs.status, id)
	case phase != old.Phase:
		bs.status[id] = bootEntry{backend.BootStatus{Phase: phase, Reason: reason, Since: time.Now()}, gen}
	default:
		old.Reason = reason
		bs.status[id] = old
	}
}

// stopWatch ends the background check of id, if one runs.
func (bs *boots) stopWatch(id string) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if cancel, ok := bs.watches[id]; ok {
		cancel()
		delete(bs.watches, id)
	}
}

// forget ends id's background check and drops its status: the machine is
// being deleted, so nothing of its boot is worth watching or showing.
func (bs *boots) forget(id string) {
	bs.stopWatch(id)
	bs.mu.Lock()
	delete(bs.status, id)
	bs.mu.Unlock()
}

// close stops every background check and waits for them.
func (bs *boots) close() {
	bs.cancel()
	bs.wg.Wait()
}

// Status is backend.BootReporter's BootStatus: the machine's boot as the
// waits on it saw it last.
func (g *Guests) Status(machineID string) (backend.BootStatus, bool) {
	g.boots.mu.Lock()
	defer g.boots.mu.Unlock()
	st, ok := g.boots.status[machineID]
	return st.BootStatus, ok
}

// Watching reports whether a background check of machineID's boot runs.
func (g *Guests) Watching(machineID string) bool {
	g.boots.mu.Lock()
	defer g.boots.mu.Unlock()
	_, ok := g.boots.watches[machineID]
	return ok
}

// awaitBooted waits, within ctx, until the machine's guest agent answers
// and the image's booted check passes (guestagent.AwaitBooted), showing
// "booting" and the guest's reason in BootStatus meanwhile. Its error is
// the check's (agent silent, boot failed with the cause, still booting at
// the deadline), logged at WARN; what, "create" or "configure", names the
// caller in the log.
func (g *Guests) awaitBooted(ctx context.Context, t Target, what string) error {
	return g.awaitBootedAs(ctx, t, what, g.boots.begin(t.MachineID, "waiting for the guest agent"))
}

// awaitBootedAs is awaitBooted as the wait gen (boots.begin).
func (g *Guests) awaitBootedAs(ctx context.Context, t Target, what string, gen uint64) error {
	name, machineID := t.Domain, t.MachineID
	start := time.Now()
	cfg := g.cfg.Booted
	if what == "configure" {
		// A Configure waits for a silent agent as long as it always did.
		cfg.AgentWait = cmp.Or(g.cfg.Bootstrap.AgentWait, guestagent.DefaultAgentWait)
	}
	cfg.Progress = func(reason string) {
		g.boots.update(machineID, gen, backend.BootBooting, reason)
		g.cfg.Log.Debug("guest booting", "domain", name, "machine", machineID, "reason", reason)
	}
	via, err := g.Client(t).AwaitBooted(ctx, cfg)
	var be *guestagent.BootError
	if errors.As(err, &be) {
		g.boots.update(machineID, gen, backend.BootFailed, be.Msg)
		g.cfg.Log.Warn("guest did not boot", "during", what, "domain", name, "machine", machineID, "err", err,
			"took", time.Since(start).Round(time.Millisecond).String())
		return err
	}
	g.boots.update(machineID, gen, "", "")
	if err != nil {
		return err // ctx ended: the caller's deadline, or a newer wait
	}
	if via == guestagent.ViaAgent {
		g.boots.once.Do(func() {
			g.cfg.Log.Info("the image has neither the booted hook nor systemctl: a guest counts as booted once its agent answers",
				"domain", name, "hook", guestagent.DefaultBootedHook)
		})
	}
	g.cfg.Log.Info("guest booted", "during", what, "domain", name, "machine", machineID, "via", string(via),
		"took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// ErrStoppedBooting marks the end of a boot wait because the domain
// stopped (AwaitBootedRunning).
var ErrStoppedBooting = errors.New("the guest stopped while it booted")

// AwaitBootedRunning is awaitBooted for Create and Configure, looking at
// the domain meanwhile: a guest that stops while it boots (its host
// rebooted, QEMU killed, the guest powered off) would never answer, and
// waiting out the deadline on it would fail a machine that is fine. The
// wait ends at once with a transient error naming the state, so the engine
// runs the call again, which starts the domain (Create's adopt,
// Configure's configurable).
func (g *Guests) AwaitBootedRunning(ctx context.Context, t Target, what string) error {
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.watchStopped(wctx, stop, t)
	}()
	err := g.awaitBooted(wctx, t, what)
	stop(nil)
	<-done
	if cause := context.Cause(wctx); err != nil && errors.Is(cause, ErrStoppedBooting) {
		g.cfg.Log.Warn("guest stopped while it booted; the call runs again and starts it", "during", what,
			"domain", t.Domain, "machine", t.MachineID, "err", cause)
		return cause
	}
	return err
}

// watchStopped ends ctx through stop, with ErrStoppedBooting (transient)
// and the domain's state, once the domain is shut off, crashed or gone. A
// host it cannot ask proves nothing: the wait goes on.
func (g *Guests) watchStopped(ctx context.Context, stop context.CancelCauseFunc, t Target) {
	name := t.Domain
	tick := time.NewTicker(g.StoppedEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var rs backend.RunState
		err := t.Host.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
			st, reason, err := dom.GetState()
			rs = domstate.Run(st, reason)
			return err
		})
		switch {
		case isNoDomain(err):
			stop(fmt.Errorf("%w: domain %s is gone (%w)", ErrStoppedBooting, name, backend.ErrTransient))
			return
		case err == nil && rs.Inactive():
			stop(fmt.Errorf("%w: domain %s is %s (%w)", ErrStoppedBooting, name, rs, backend.ErrTransient))
			return
		}
	}
}

// WatchBoot checks, in the background, the boot of a guest reconcile has
// just started again, so the machine shows "booting" until it has booted
// (BootStatus; a Configure on it waits itself). A boot that fails stays
// visible as "boot failed" with its cause. Bounded by BootTimeout; a later
// wait on the machine or Close ends it.
func (g *Guests) WatchBoot(t Target) {
	machineID := t.MachineID
	ctx, cancel := context.WithTimeout(g.boots.stop, g.cfg.BootTimeout)
	g.boots.mu.Lock()
	if old, ok := g.boots.watches[machineID]; ok {
		old()
	}
	g.boots.watches[machineID] = cancel
	g.boots.mu.Unlock()
	gen := g.boots.begin(machineID, "started again by reconcile")
	g.boots.wg.Add(1)
	go func() {
		defer g.boots.wg.Done()
		defer cancel()
		_ = g.awaitBootedAs(ctx, t, "restart", gen) // logged; BootStatus shows a failure
	}()
}

// bootedFirst is Configure's check that the guest has booted before the
// bootstrap hook runs: a guest reconcile started again may still be
// booting. Its error names the cause, prefixed as Configure's errors are.
func (g *Guests) bootedFirst(ctx context.Context, t Target) error {
	if !g.cfg.WaitBooted {
		return nil
	}
	g.boots.stopWatch(t.MachineID)
	if err := g.AwaitBootedRunning(ctx, t, "configure"); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return nil
}
