package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/reconcile"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The accept path's side of the zones listed since start (reconcile.Listed
// says why a mutation waits for its zone's first listing).

// WaitFirstReconcile blocks until the first reconcile pass since Start
// has completed or ctx ends, and reports whether it completed.
func (e *Engine) WaitFirstReconcile(ctx context.Context) bool {
	select {
	case <-e.listed.First():
		return true
	case <-ctx.Done():
		return false
	}
}

// listingWait bounds how long a mutation waits (holding no lock) for its
// zone's first listing: a host that connected after start is listed by
// the reconcile the mutation wakes, within its inventory timeout.
var listingWait = 20 * time.Second

// awaitListing lets a mutation of a machine whose zone has not been listed
// yet wake reconcile and wait for it, before it takes the machine's lock
// (reconcile takes it too). A zone whose host is still on its first
// connection attempt (backend.ErrHostConnecting) is waited for too; one
// whose host is down is not. notListed still refuses if the wait ran out.
func (e *Engine) awaitListing(ctx context.Context, id string) {
	m, ok := e.idx.Get(id)
	if !ok || e.listed.Covers(m.Zone, e.listingHost(m)) {
		return
	}
	if zr := e.can.ZoneReadiness; zr != nil {
		if err := zr.ZoneReady(m.Zone); err != nil && !errors.Is(err, backend.ErrHostConnecting) {
			return // its host is down: refused at once, as Unavailable
		}
	}
	if hr := e.can.HostReadiness; hr != nil {
		// Its own host, or without one any host it may be on, is down:
		// no listing can come, refused at once.
		hosts := []string{m.HostName}
		switch e.listingHost(m) {
		case "":
			hosts = e.listed.Missing(m.Zone)
		case reconcile.NoHost:
			hosts = nil
		}
		for _, h := range hosts {
			if err := hr.HostReady(m.Zone, h); err != nil && !errors.Is(err, backend.ErrHostConnecting) {
				return
			}
		}
	}
	e.listed.Wake()
	wctx, cancel := context.WithTimeout(ctx, listingWait)
	defer cancel()
	e.listed.AwaitCovers(wctx, m.Zone, e.listingHost(m), true)
}

// ZoneListed reports whether zone has been listed since the engine started.
func (e *Engine) ZoneListed(zone string) bool { return e.listed.Has(zone) }

// WaitReadyZonesListed blocks until every zone whose host is ready now
// (backend.ZoneReadiness; every zone without it) has been listed since
// Start, or ctx ends, and reports whether they all were. serve uses it so
// that a start after a lost state file serves its reachable zones with
// their marks restored, without waiting for a host that is down or still
// connecting.
func (e *Engine) WaitReadyZonesListed(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a zone the first pass did not list waits for no later one
		select {
		case <-e.listed.First():
			cancel()
		case <-ctx.Done():
		}
	}()
	zr := e.can.ZoneReadiness
	for _, z := range e.be.Zones() {
		if zr != nil && zr.ZoneReady(z) != nil {
			continue
		}
		if !e.listed.Await(ctx, z) {
			return false
		}
	}
	return true
}

// listingHost is the host whose listing a mutation of m waits for:
// its recorded host; reconcile.NoHost for a SPECULATIVE record without one
// in a zone a listing of every host has confirmed since its records were
// seeded (it proves there is no domain, so the zone's first listing since
// start is enough); "" (every host of the zone) in a zone still
// rebuilding (a first start, a lost state file), whose domain may be on
// any host.
func (e *Engine) listingHost(m *record.Machine) string {
	if m.HostName != "" || m.State != record.Speculative {
		return m.HostName
	}
	e.rebuildMu.Lock()
	defer e.rebuildMu.Unlock()
	if e.rebuilding[m.Zone] {
		return ""
	}
	return reconcile.NoHost
}

// confirmRebuilt clears, durably, each rebuilding zone every host of which
// has been listed since start (its machines adopted by then). A failed
// write is tried again after the next pass; until then the zone waits as
// before, which is safe.
func (e *Engine) confirmRebuilt(ctx context.Context) {
	e.rebuildMu.Lock()
	done := map[string]bool{}
	for z := range e.rebuilding {
		if e.listed.Covers(z, "") {
			done[z] = false
		}
	}
	e.rebuildMu.Unlock()
	if len(done) == 0 {
		return
	}
	if err := e.durable(ctx, record.Batch{Rebuilding: done}); err != nil {
		e.log.Warn("zones listed whole not recorded; tried again after the next pass", "zones", len(done), "err", err)
		return
	}
	e.rebuildMu.Lock()
	for z := range done {
		delete(e.rebuilding, z)
	}
	e.rebuildMu.Unlock()
	for z := range done {
		e.log.Info("every host of the zone listed since its records were seeded: its slots need no whole-zone listing after a restart", "zone", z)
	}
}

// notListed is the refusal for a machine whose zone, or host, has not
// been listed since start.
func (e *Engine) notListed(m *record.Machine) *record.Error {
	if e.listed.Covers(m.Zone, e.listingHost(m)) {
		return nil
	}
	e.listed.Wake()
	switch {
	case !e.listed.Has(m.Zone):
		return record.Errorf(record.CodeUnavailable, "zone %q has not been listed since the provider started (machines, bindings and fence marks are read from its host first); retry shortly", m.Zone)
	case m.HostName != "":
		return record.Errorf(record.CodeUnavailable, "host %q of zone %q has not been listed since the provider started (the machine's binding and fence marks are read from it first); retry shortly", m.HostName, m.Zone)
	}
	return record.Errorf(record.CodeUnavailable, "not every host of zone %q has been listed since the provider started, and which one holds machine %q is not known (its binding and fence marks are read from it first); retry shortly", m.Zone, m.ID)
}
