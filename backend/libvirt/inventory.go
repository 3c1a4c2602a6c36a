package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
	"github.com/bigfleet/libvirt-provider/backend/placement"
)

// perHost runs fn for every host in parallel, each bounded by bound (and
// ctx). A host that does not answer in time yields
// onTimeout; its call finishes in the background (libvirt calls cannot be
// interrupted) and its result is dropped.
func perHost[T any](ctx context.Context, b *Backend, bound time.Duration, fn func(h *host) T, onTimeout func(h *host, err error) T) []T {
	out := make([]T, len(b.loc.list))
	var wg sync.WaitGroup
	for i, h := range b.loc.list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			done := make(chan T, 1)
			go func() { done <- fn(h) }()
			select {
			case r := <-done:
				out[i] = r
			case <-tctx.Done():
				out[i] = onTimeout(h, fmt.Errorf("%s: no answer within %s: %w",
					h.Where(), bound, backend.ErrHostUnavailable))
			}
		}()
	}
	wg.Wait()
	return out
}

// Inventory lists our own domains on every host, one entry per zone, in
// zone order. A zone of several hosts is listed when at least one of them
// was: the machines of a host that could not be listed are missing from
// it, and the engine keeps them (ConfirmGone cannot reach their host).
// Only a zone none of whose hosts answered reports Err.
func (b *Backend) Inventory(ctx context.Context) []backend.ZoneInventory {
	got := map[string]backend.ZoneInventory{}
	b.InventoryEach(ctx, 0, func(zi backend.ZoneInventory) { got[zi.Zone] = zi })
	out := make([]backend.ZoneInventory, 0, len(b.loc.zones))
	for _, z := range b.loc.zones {
		out = append(out, got[z])
	}
	return out
}

// InventoryEach is backend.ZoneStreamer: hosts are listed at most
// concurrency at a time, each within the inventory timeout, and a zone is
// handed to fn as soon as its last host is done.
func (b *Backend) InventoryEach(ctx context.Context, concurrency int, fn func(backend.ZoneInventory)) {
	if concurrency <= 0 {
		concurrency = b.cfg.ListConcurrency
	}
	type listing struct {
		h  *host
		zi backend.ZoneInventory
	}
	results := make(chan listing, len(b.loc.list))
	go func() { // starts hosts while the zones already done are handed on
		sem := make(chan struct{}, concurrency)
		for _, h := range b.loc.list {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				results <- listing{h, b.lister.listBounded(ctx, h)}
			}()
		}
	}()
	left := map[string]int{}
	for _, h := range b.loc.list {
		left[h.zone]++
	}
	merged := map[string]*zoneMerge{}
	for range b.loc.list {
		r := <-results
		m := merged[r.h.zone]
		if m == nil {
			m = &zoneMerge{zone: r.h.zone}
			merged[r.h.zone] = m
		}
		if why, down := b.loc.down.reason(r.h.name); down {
			m.addDown(r.h.refName(), why, r.zi)
		} else {
			m.add(r.h.refName(), r.zi)
		}
		if left[r.h.zone]--; left[r.h.zone] == 0 {
			fn(m.result(b.log))
		}
	}
}

// zoneMerge gathers the listings of one zone's hosts.
type zoneMerge struct {
	zone            string
	listed          bool
	machines        []backend.Observed
	errs            []error
	hosts, unlisted []string
	down            map[string]string
	fenced          []backend.Observed
}

// addDown adds a host declared down: listed with nothing running, whatever
// it answered; what it holds, if it answered, is fenced (down.go).
func (m *zoneMerge) addDown(host, why string, zi backend.ZoneInventory) {
	m.listed = true
	m.hosts = append(m.hosts, host)
	if m.down == nil {
		m.down = map[string]string{}
	}
	m.down[host] = why
	if zi.Err == nil {
		m.fenced = append(m.fenced, zi.Machines...)
	}
}

func (m *zoneMerge) add(host string, zi backend.ZoneInventory) {
	if zi.Err != nil {
		m.errs = append(m.errs, zi.Err)
		m.unlisted = append(m.unlisted, host)
		return
	}
	m.listed = true
	m.hosts = append(m.hosts, host)
	m.machines = append(m.machines, zi.Machines...)
}

func (m *zoneMerge) result(log *slog.Logger) backend.ZoneInventory {
	if !m.listed {
		return backend.ZoneInventory{Zone: m.zone, Err: errors.Join(m.errs...)}
	}
	if len(m.errs) > 0 {
		log.Warn("zone listed without some of its hosts; their machines are kept as they are",
			"zone", m.zone, "err", errors.Join(m.errs...))
	}
	return backend.ZoneInventory{Zone: m.zone, Machines: m.machines, Hosts: m.hosts, Unlisted: m.unlisted, Down: m.down, Fenced: m.fenced}
}

// lister lists one host's domains for an inventory and reads its status;
// after a listing it looks for (and sweeps) the volumes failed migrations
// left there (leftovers.go).
type lister struct {
	cfg      *Config
	log      *slog.Logger
	plan     *placement.Planner
	leftover *leftovers
	store    volume.Store
}

// listBounded lists one host within the inventory timeout. A host still on
// its first connection attempt is waited for within that bound (so the
// first reconcile after start lists it). One listing per host at a time:
// while an earlier one is still inside libvirt, the host is reported
// unlisted rather than asked again (each would pin one more thread).
func (l *lister) listBounded(ctx context.Context, h *host) backend.ZoneInventory {
	tctx, cancel := context.WithTimeout(ctx, l.cfg.InventoryTimeout)
	defer cancel()
	unlisted := func(why string) backend.ZoneInventory {
		return backend.ZoneInventory{Zone: h.zone, Err: fmt.Errorf("%s: %s: %w", h.Where(), why, backend.ErrHostUnavailable)}
	}
	select {
	case <-h.FirstAttempt():
	case <-tctx.Done():
		return unlisted(fmt.Sprintf("still connecting after %s", l.cfg.InventoryTimeout))
	}
	if !h.listing.TryLock() {
		return unlisted("its previous listing is still waiting for libvirt")
	}
	done := make(chan backend.ZoneInventory, 1)
	go func() {
		zi := l.listHost(h)
		h.listing.Unlock() // before the answer: the next pass may follow at once
		done <- zi
	}()
	select {
	case zi := <-done:
		return zi
	case <-tctx.Done():
		return unlisted(fmt.Sprintf("no answer within %s", l.cfg.InventoryTimeout))
	}
}

func (l *lister) listHost(h *host) backend.ZoneInventory {
	zi := backend.ZoneInventory{Zone: h.zone}
	sizes := map[string]placement.Size{}
	started := h.listingStarts()
	var vols []string // the pool's volume names (nil: not read)
	err := h.With(func(conn virt.Conn) error {
		doms, err := conn.ListAllDomains(0)
		if err != nil {
			return fmt.Errorf("list domains: %w", err)
		}
		defer freeAll(doms)
		prefix := meta.NamePrefix(l.cfg.Provider)
		for i := range doms {
			o, sz, ok, err := l.observeDomain(doms[i], h, prefix)
			if err != nil {
				return fmt.Errorf("listing incomplete: %w", err)
			}
			if ok {
				zi.Machines = append(zi.Machines, o)
				sizes[o.MachineID] = sz
			}
		}
		h.ReadSize(conn)
		vols = l.store.Names(conn)
		return nil
	})
	if err != nil {
		zi.Err, zi.Machines = err, nil
		return zi
	}
	h.observeSizes(started, zi.Machines, sizes)
	l.findLeftovers(h, zi.Machines, vols)
	l.sweepLeftovers(h, zi.Machines)
	return zi
}

// observeDomain reads one domain; ok is false for domains that are not
// ours. Any error reading a domain that may be ours (its name has our
// prefix) is returned, and makes the whole listing incomplete: a domain we
// could not read must never look like a domain that is not there. A domain
// that vanished while we listed is simply not there any more.
func (l *lister) observeDomain(dom virt.Domain, h *host, prefix string) (backend.Observed, placement.Size, bool, error) {
	o, md, ok, err := l.observeOne(dom, h.zone, prefix)
	if !ok || err != nil {
		return o, placement.Size{}, ok, err
	}
	o.Placement.Host = h.refName()
	return o, placement.Size{VCPUs: md.VCPUs, MemoryMiB: int64(md.MemoryMiB)}, true, nil
}

func (l *lister) observeOne(dom virt.Domain, zone, prefix string) (backend.Observed, meta.Metadata, bool, error) {
	name, err := dom.GetName()
	if isNoDomain(err) {
		return backend.Observed{}, meta.Metadata{}, false, nil
	}
	if err != nil {
		return backend.Observed{}, meta.Metadata{}, false, fmt.Errorf("name of a listed domain: %w", err)
	}
	if !strings.HasPrefix(name, prefix) {
		return backend.Observed{}, meta.Metadata{}, false, nil
	}
	md, found, err := meta.Read(dom)
	switch {
	case isNoDomain(err):
		return backend.Observed{}, meta.Metadata{}, false, nil
	case err != nil && !found:
		return backend.Observed{}, meta.Metadata{}, false, fmt.Errorf("metadata of %s: %w", name, err)
	case err != nil:
		// A damaged element is not trusted as ours (nor listed), but said
		// so. Its machine is not declared vanished either: ConfirmGone
		// finds the domain.
		l.log.Warn("domain with unreadable bigfleet metadata skipped", "zone", zone, "domain", name, "err", err)
		return backend.Observed{}, meta.Metadata{}, false, nil
	case !found || md.Provider != l.cfg.Provider:
		return backend.Observed{}, meta.Metadata{}, false, nil
	}
	if err := meta.CheckTerm(name, md); err != nil {
		// Listed all the same (reading changes nothing); the replica
		// learns here, at its next pass, that another leads.
		l.log.Warn("a newer leader wrote a domain of ours: this replica must stop acting", "zone", zone, "err", err)
	}
	st, reason, err := dom.GetState()
	if isNoDomain(err) {
		return backend.Observed{}, meta.Metadata{}, false, nil
	}
	if err != nil {
		return backend.Observed{}, meta.Metadata{}, false, fmt.Errorf("state of %s: %w", name, err)
	}
	return backend.Observed{
		MachineID:     md.MachineID,
		OperationID:   md.OperationID,
		Placement:     backend.Placement{Zone: zone, Domain: name},
		Running:       domstate.Running(st),
		Run:           domstate.Run(st, reason),
		ClusterID:     md.ClusterID,
		ShardMetadata: md.ShardMetadata,
		Marks:         md.Marks,

		DeleteOperationID: md.Delete.OperationID, // a Delete cut short: never adopted
		Configure: backend.ConfigureIntent{OperationID: md.Configure.OperationID, ClusterID: md.Configure.ClusterID,
			ShardMetadata: md.Configure.ShardMetadata}, // a Configure cut short: ended as its guest tells
	}, md, true, nil
}

func freeAll(doms []virt.Domain) {
	for _, d := range doms {
		_ = d.Free()
	}
}

// statusTimeout bounds a host's status in Hosts: an operator's host list
// must not hang on one silent host (it shows the host as last known).
const statusTimeout = 5 * time.Second

// Hosts reports every host: connection state, versions, pool usage and the
// number of domains it holds (all of them, ours or not).
func (b *Backend) Hosts(ctx context.Context) []backend.HostStatus {
	out := perHost(ctx, b, min(b.cfg.InventoryTimeout, statusTimeout), b.lister.hostStatus, func(h *host, err error) backend.HostStatus {
		st := h.baseStatus()
		st.LastError = err.Error()
		return st
	})
	for i := range out {
		out[i].DownReason, out[i].Down = b.loc.down.reason(out[i].Name)
	}
	return out
}

func (h *host) baseStatus() backend.HostStatus {
	st := h.Status()
	h.capacityStatus(&st)
	return st
}

func (l *lister) hostStatus(h *host) backend.HostStatus {
	st := h.baseStatus()
	err := h.With(func(conn virt.Conn) error {
		st.LibvirtVersion, st.HypervisorVersion = h.Versions(conn)
		if pool, err := conn.LookupStoragePoolByName(l.cfg.Pool); err == nil {
			if info, err := pool.GetInfo(); err == nil {
				st.PoolCapacity, st.PoolAllocation = info.Capacity, info.Allocation
			}
			_ = pool.Free()
		}
		h.ReadSize(conn)
		h.capacityStatus(&st)
		active, err := conn.NumOfDomains()
		if err != nil {
			return err
		}
		inactive, err := conn.NumOfDefinedDomains()
		if err != nil {
			return err
		}
		st.DomainCount = active + inactive
		return nil
	})
	if err != nil {
		st.Connected, st.LastError = h.Ready() == nil, err.Error()
	}
	return st
}
