package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/fake"
	"github.com/bigfleet/libvirt-provider/backend/hostsfile"
	"github.com/bigfleet/libvirt-provider/backend/placement"
	"github.com/bigfleet/libvirt-provider/server"
	"github.com/bigfleet/libvirt-provider/server/capacity"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// openBackend picks the substrate. The fake is only ever used when asked
// for by name, and says so loudly.
func openBackend(ctx context.Context, cfg config, log *slog.Logger) (backend.Backend, error) {
	if !cfg.UseFakeBackend {
		return openLibvirt(ctx, cfg, log)
	}
	if cfg.HostsFile != "" {
		return openFakeHosts(cfg, log)
	}
	zones := fake.DefaultZones
	if cfg.FakeZones != "" {
		zones = splitList(cfg.FakeZones)
	}
	log.Warn("using the FAKE backend (--use-fake-backend): no VMs are created; for conformance tests and development, NOT for production",
		slog.Any("zones", zones), slog.String("fake_delay", cfg.FakeDelay.String()))
	return fake.New(fake.Options{Zones: zones, Delay: cfg.FakeDelay}), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// buildSeed turns the capacity flags into the slots the engine offers.
func buildSeed(cfg config, zones []string) ([]record.Machine, error) {
	prices, err := capacity.ParsePrices(cfg.Prices)
	if err != nil {
		return nil, fmt.Errorf("--prices: %w", err)
	}
	cc := capacity.DefaultConfig(zones)
	cc.InstanceTypesFile = cfg.InstanceTypes
	cc.OfferingsFile = cfg.Offerings
	cc.SeedCount = cfg.SeedCount
	cc.CapacityType = cfg.CapacityType
	cc.PricePerVCPUHour = cfg.PricePerVCPUHour
	cc.PricePerGiBHour = cfg.PricePerGiBHour
	cc.Prices = prices
	model, err := capacity.Load(cc)
	if err != nil {
		return nil, err
	}
	return model.Seed(), nil
}

// trackedStore remembers whether it has been closed, so readiness and
// health can report a closed store without the store having to expose it.
type trackedStore struct {
	record.Store
	closed atomic.Bool
}

func (s *trackedStore) Close() error {
	s.closed.Store(true)
	return s.Store.Close()
}

func (s *trackedStore) ready() error {
	if s.closed.Load() {
		return errors.New("state store is closed")
	}
	return nil
}

// openStore opens the bbolt file, or an in-memory store (with a loud
// warning) when --state is empty.
func openStore(cfg config, metrics *server.Metrics, log *slog.Logger) (*trackedStore, error) {
	if cfg.State == "" {
		log.Warn("NO --state FILE: state is kept in memory and LOST on exit; every restart forgets all machines, fencing marks and admin cordons")
		return &trackedStore{Store: store.NewMemory()}, nil
	}
	st, err := store.OpenBolt(cfg.State, store.BoltOptions{OnCommit: metrics.StoreCommitted})
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", cfg.State, err)
	}
	return &trackedStore{Store: st}, nil
}

// counts adapts the engine's counts to the metrics collector; the engine
// is created after the registry, hence the indirection.
func counts(eng *atomic.Pointer[lifecycle.Engine]) server.CountsFunc {
	return func(emit func(record.State, string, int)) {
		e := eng.Load()
		if e == nil {
			return
		}
		for k, n := range e.Counts() {
			emit(k.State, k.Zone, n)
		}
	}
}

// restoreFakeVMs gives the fake backend back the VMs the state file says
// exist (see fake.Backend.Restore). It must run before the engine's first
// reconcile.
func restoreFakeVMs(ctx context.Context, be backend.Backend, eng *lifecycle.Engine) error {
	fb, ok := be.(*fake.Backend)
	if !ok {
		return nil
	}
	all, err := eng.List(ctx, record.ListQuery{})
	if err != nil {
		return err
	}
	for _, m := range all.Machines {
		if m.Domain == "" {
			continue
		}
		vm := fake.VM{MachineID: m.ID, OperationID: m.OperationID, InstanceType: m.InstanceType,
			VCPU: m.VCPU, MemoryMiB: m.MemoryMiB, Running: true,
			Placement: m.Placement()}
		if m.State == record.Configured || m.State == record.Draining {
			vm.Binding = &fake.Binding{ClusterID: m.Cluster, ShardMetadata: m.ShardMetadata}
		}
		fb.Restore(vm)
	}
	return nil
}

// hostsUp reports each zone's host as up unless the backend says it is
// unreachable right now (a backend without that notion is always up).
func hostsUp(be backend.Backend) server.HostsUpFunc {
	return func() map[string]bool {
		zr, ok := be.(backend.ZoneReadiness)
		out := make(map[string]bool, len(be.Zones()))
		for _, z := range be.Zones() {
			out[z] = !ok || zr.ZoneReady(z) == nil
		}
		return out
	}
}

// domainTypes reads each zone's domain type for the host_domain_type gauge;
// backends without hosts (the fake) report none.
func domainTypes(be backend.Backend) server.DomainTypesFunc {
	return func() map[string]string {
		dt, ok := be.(backend.DomainTyper)
		if !ok {
			return nil
		}
		out := make(map[string]string, len(be.Zones()))
		for _, z := range be.Zones() {
			out[z] = dt.DomainType(z)
		}
		return out
	}
}

// openFakeHosts builds the fake from a --hosts file: each host sized by
// its fake: block (or the defaults), placement by --placement.
func openFakeHosts(cfg config, log *slog.Logger) (backend.Backend, error) {
	f, err := hostsfile.Load(cfg.HostsFile)
	if err != nil {
		return nil, err
	}
	policy, _ := placement.ParsePolicy(cfg.Placement) // validated
	hosts := make([]fake.Host, 0, len(f.Hosts))
	for _, h := range f.Hosts {
		sz := h.FakeSize()
		hosts = append(hosts, fake.Host{Name: h.Name, Zone: h.Zone, Labels: h.Labels,
			VCPUs: sz.VCPUs, MemoryMiB: sz.MemoryMiB, PoolGiB: sz.PoolGiB,
			CPUOvercommit: h.Overcommit.CPU, MemoryOvercommit: h.Overcommit.Memory, Cordoned: h.Cordoned})
	}
	log.Warn("using the FAKE backend (--use-fake-backend) with the hosts of --hosts: no VMs are created; for conformance tests and development, NOT for production",
		slog.String("hosts_file", cfg.HostsFile), slog.Int("hosts", len(hosts)), slog.Any("zones", f.Zones()),
		slog.String("placement", string(policy)), slog.String("fake_delay", cfg.FakeDelay.String()))
	return fake.New(fake.Options{Hosts: hosts, Policy: policy, Delay: cfg.FakeDelay}), nil
}
