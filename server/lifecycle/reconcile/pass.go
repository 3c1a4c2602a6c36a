package reconcile

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/arbiter"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A reconcile pass runs in two phases. The streaming phase takes each
// zone's listing as soon as its hosts answered (backend.ZoneStreamer, or
// Inventory's result zone by zone): it restores that zone's fence marks,
// adopts, relocates and judges its records, then marks the zone listed at
// once, so a slow or dead host never delays another zone's mutations.
// Whatever needs a further backend call on one machine (ConfirmGone for a
// VM missing from the listing, checkRun for a domain that is not running)
// is queued instead and run in the second phase, in parallel: at most
// ReconcileConcurrency calls overall and PerHostCalls per host, so one
// slow host holds at most PerHostCalls of the slots and never another
// host's calls.

// DefaultReconcileConcurrency is Config.ReconcileConcurrency's default.
const DefaultReconcileConcurrency = 32

// PerHostCalls bounds the queued calls running at once on one host: a
// host is not flooded with lookups and starts after a rack comes back.
const PerHostCalls = 2

func (r *Reconciler) reconcileConcurrency() int {
	if c := r.cfg.ReconcileConcurrency; c > 0 {
		return c
	}
	return DefaultReconcileConcurrency
}

// pass is the state of one Reconcile call.
type pass struct {
	r      *Reconciler
	byZone map[string][]string // machine ids by zone, read as the pass began

	mu   sync.Mutex // rep and down: queued jobs count in parallel
	rep  Report
	down map[string]map[string]int // listed zone → run state → machines

	jobs map[string][]passJob // by host, run after the streaming phase
}

// passJob is one queued backend call on one machine. sick says an earlier
// call of this pass to the same host failed as unreachable or timed out:
// the job must then make no backend call (its machine waits for the next
// pass) rather than wait out another bound.
type passJob func(ctx context.Context, sick bool) error

func (r *Reconciler) newPass() *pass {
	p := &pass{r: r, byZone: map[string][]string{}, down: map[string]map[string]int{},
		jobs: map[string][]passJob{}, rep: Report{At: r.cfg.Now(), Zones: map[string]string{}}}
	for _, id := range r.eng.IDs() {
		if m, ok := r.eng.Get(id); ok {
			p.byZone[m.Zone] = append(p.byZone[m.Zone], id)
		}
	}
	return p
}

// list streams the zones' listings to p.zone, one call at a time.
func (p *pass) list(ctx context.Context) {
	if zs := p.r.can.ZoneStreamer; zs != nil {
		zs.InventoryEach(ctx, p.r.reconcileConcurrency(), func(zi backend.ZoneInventory) { p.zone(ctx, zi) })
		return
	}
	for _, zi := range p.r.be.Inventory(ctx) {
		p.zone(ctx, zi)
	}
}

// zone reconciles one zone's listing and marks the zone listed.
func (p *pass) zone(ctx context.Context, zi backend.ZoneInventory) {
	r := p.r
	p.mu.Lock()
	if zi.Err != nil {
		p.rep.Zones[zi.Zone] = zi.Err.Error()
	} else {
		p.rep.Zones[zi.Zone] = ""
		p.down[zi.Zone] = map[string]int{}
	}
	p.mu.Unlock()
	if zi.Err != nil {
		r.log.Warn("reconcile: host not listed", "zone", zi.Zone, "err", zi.Err)
		r.views.Put(arbiter.FromInventory(zi, p.rep.At)) // nothing of the zone is known now
		return
	}
	r.eng.RestoreMarks(ctx, zi) // before any adoption: a rebuilt machine is never seen without its marks
	v := arbiter.FromInventory(zi, p.rep.At)
	r.views.Put(v)
	seen := byMachine(zi.Machines)
	p.fenced(zi)
	p.duplicates(zi, seen)
	p.migrations(zi)
	for _, id := range p.byZone[zi.Zone] {
		if ctx.Err() != nil {
			return // not marked: a cut listing proves nothing
		}
		p.machine(ctx, id, seen, zi, v)
	}
	if ctx.Err() == nil {
		r.listed.Mark(zi.Zone, zi.Hosts, zi.Unlisted)
	}
}

// byMachine indexes a zone's listing. Two hosts of a zone may both hold
// the machine's domain for a while (a migration cut by a restart): the
// running copy is the machine; of copies that do not run, never a
// migration's stale source when another copy is there.
func byMachine(obs []backend.Observed) map[string]backend.Observed {
	out := make(map[string]backend.Observed, len(obs))
	rank := func(o backend.Observed) int {
		switch {
		case o.Run.Up():
			return 2
		case arbiter.StaleSource(o):
			return 0
		}
		return 1
	}
	for _, o := range obs {
		if prev, dup := out[o.MachineID]; !dup || rank(o) > rank(prev) {
			out[o.MachineID] = o
		}
	}
	return out
}

// machine judges one record of a listed zone; a further backend call is
// queued for the second phase.
func (p *pass) machine(ctx context.Context, id string, seen map[string]backend.Observed, zi backend.ZoneInventory, v *arbiter.View) {
	r, at := p.r, p.rep.At
	m, ok := r.eng.Get(id)
	if !ok || r.eng.Migrating(id, at) {
		return // a migration holds it, or ended after the listing
	}
	o, found := seen[id]
	if !found && r.needsConfirm(m, at) && arbiter.Gone(m, v).Kind != arbiter.Act {
		p.queue(hostKey(m.Zone, m.HostName), func(ctx context.Context, sick bool) error {
			return p.confirmMissing(ctx, m, sick, v)
		})
		return
	}
	what := r.reconcileOne(id, o, found, at, v)
	p.count(what, "", "")
	switch {
	case what == "leftover":
		p.leftover(m, o, zi)
		return
	case strings.HasPrefix(what, "relocation wait"):
		p.wait(m, WaitRelocation, zi)
		return
	case strings.HasPrefix(what, "adoption refuse"):
		r.log.Warn("reconcile: a domain of a SPECULATIVE machine not adopted", "machine", id, "zone", m.Zone,
			"host", o.Placement.Host, "why", strings.TrimPrefix(what, "adoption refuse: "))
		return
	case strings.HasPrefix(what, "relocation refuse"):
		r.log.Warn("reconcile: machine's domain found on another host; not moved", "machine", id, "zone", m.Zone,
			"recorded_host", m.HostName, "found_on", o.Placement.Host, "why", strings.TrimPrefix(what, "relocation refuse: "))
		return
	}
	if what != "" || !found {
		return
	}
	if o.Run.Up() {
		r.checkRun(ctx, o, at, false, v) // no backend call: it only clears our note
		return
	}
	p.queue(hostKey(o.Placement.Zone, o.Placement.Host), func(ctx context.Context, sick bool) error {
		st, restarted, err := r.checkRun(ctx, o, at, sick, v)
		p.count("", st, m.Zone)
		if restarted {
			p.count("restarted", "", "")
		}
		return err
	})
}

// confirmMissing is the queued half of a machine missing from a complete
// listing (issue 10: missing is not enough, ConfirmGone must confirm).
func (p *pass) confirmMissing(ctx context.Context, m *record.Machine, sick bool, v *arbiter.View) error {
	if sick {
		return nil // not known this pass: kept
	}
	keep, err := p.r.keepMissing(ctx, m, p.rep.At)
	if keep || p.r.eng.Migrating(m.ID, p.rep.At) {
		return err
	}
	p.count(p.r.reconcileOne(m.ID, backend.Observed{}, false, p.rep.At, v), "", "")
	return nil
}

// hostKey names the host a queued call goes to: the placement's host, or
// its zone for a placement recorded before zones held several hosts.
func hostKey(zone, host string) string {
	if host != "" {
		return zone + "/" + host
	}
	return zone
}

func (p *pass) queue(host string, j passJob) { p.jobs[host] = append(p.jobs[host], j) }

// count adds one outcome to the report: what reconcileOne did, or a run
// state still not running (in zone).
func (p *pass) count(what, down, zone string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch what {
	case "adopted":
		p.rep.Adopted++
	case "vanished":
		p.rep.Vanished++
	case "restarted":
		p.rep.Restarted++
	}
	if down != "" {
		p.rep.NotRunning++
		if p.down[zone] == nil {
			p.down[zone] = map[string]int{}
		}
		p.down[zone][down]++
	}
}

// runQueued runs the queued calls: per host up to PerHostCalls workers,
// each call holding one of the pass's ReconcileConcurrency slots. A call
// that finds its host unreachable or past its bound makes the host sick
// for the rest of the pass.
func (p *pass) runQueued(ctx context.Context) {
	slots := make(chan struct{}, p.r.reconcileConcurrency())
	var wg sync.WaitGroup
	for _, jobs := range p.jobs {
		h := &hostJobs{jobs: jobs}
		for range min(PerHostCalls, len(jobs)) {
			wg.Go(func() { h.work(ctx, slots) })
		}
	}
	wg.Wait()
	p.jobs = nil
}

// hostJobs are one host's queued calls, shared by its workers.
type hostJobs struct {
	mu   sync.Mutex
	jobs []passJob
	sick bool
}

func (h *hostJobs) next() (passJob, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.jobs) == 0 {
		return nil, false
	}
	j := h.jobs[0]
	h.jobs = h.jobs[1:]
	return j, h.sick
}

func (h *hostJobs) work(ctx context.Context, slots chan struct{}) {
	for ctx.Err() == nil {
		j, sick := h.next()
		if j == nil {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := j(ctx, sick)
		<-slots
		if hostUnreachable(err) {
			h.mu.Lock()
			h.sick = true
			h.mu.Unlock()
		}
	}
}

// hostUnreachable: the call's host did not answer (down, dropped, or past
// the call's bound), so further calls there this pass would only wait.
func hostUnreachable(err error) bool {
	return err != nil && (backend.IsTransient(err) || errors.Is(err, context.DeadlineExceeded))
}
