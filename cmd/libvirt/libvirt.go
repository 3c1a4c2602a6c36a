package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/hostsfile"
	"github.com/bigfleet/libvirt-provider/backend/libvirt"
	"github.com/bigfleet/libvirt-provider/backend/placement"
	"github.com/bigfleet/libvirt-provider/server/capacity"
)

// openLibvirt builds the libvirt backend from the flags: --connect (a bare
// URI for --default-zone, or zone=uri,..., a zone named several times
// being a pool of hosts) or --hosts FILE, --placement, --provider, --image,
// --storage-pool, --network, --base-user-data, --kernel/--initrd/--cmdline,
// the guest-agent bounds (--agent-timeout, --agent-wait, --drain-margin)
// and --credentials-dir.
// Weak transports and malformed host lists are refused here, naming the
// flag; a host that is down is not: it is retried in the background and
// its zone reports unavailable until it answers.
func openLibvirt(ctx context.Context, cfg config, log *slog.Logger) (backend.Backend, error) {
	hosts, err := libvirtHosts(cfg)
	if err != nil {
		return nil, err
	}
	policy, _ := placement.ParsePolicy(cfg.Placement) // validated
	shapes, typeMemory, err := capacity.LoadShapes(cfg.InstanceTypes)
	if err != nil {
		return nil, err
	}
	be, err := libvirt.New(libvirt.Config{
		Shapes:         shapes,
		ShapeMemoryMiB: typeMemory,
		Hosts:          hosts,
		Policy:         policy,
		Provider:       cfg.Provider,
		Image:          cfg.Image,
		Pool:           cfg.StoragePool,
		Network:        cfg.Network,
		BaseUserData:   cfg.BaseUserData,
		Kernel:         cfg.Kernel,
		Initrd:         cfg.Initrd,
		Cmdline:        cfg.Cmdline,
		DomainType:     cfg.DomainType,
		// Bounds the credential paths of --connect and --hosts URIs alike.
		CredentialsDir:  cfg.CredentialsDir,
		MigratePlain:    !cfg.MigrateTLS,
		AgentTimeout:    cfg.AgentTimeout,
		CallTimeout:     cfg.LibvirtCallTimeout,
		ListConcurrency: cfg.ReconcileConcurrency,
		MigrateTimeout:  cfg.MigrateTimeout,
		Bootstrap: guestagent.BootstrapConfig{
			AgentWait:   cfg.AgentWait,
			DrainMargin: cfg.DrainMargin,
		},
		WaitBooted: cfg.WaitBooted,
		// A guest reconcile starts again gets as long to boot as a Create.
		BootTimeout: cfg.CreateTimeout,
		// openBackend does not hand its logger down; this one has the same
		// level, format and destination (stderr).
		Logger: log.With(slog.String("component", "libvirt")),
	})
	if err != nil {
		// Each cause names its own flag; the prefix says which part failed.
		return nil, fmt.Errorf("--connect: libvirt backend not started: %w", err)
	}
	// What the instance types' shapes need of the hosts (firmware, TPM,
	// huge pages, networks, a golden image no larger than disk_gib) is
	// checked on every host that answers within the call bound; a shape a
	// host cannot give stops the process here, naming type and field.
	sctx, cancel := context.WithTimeout(ctx, cfg.LibvirtCallTimeout+5*time.Second)
	defer cancel()
	if err := be.CheckShapes(sctx); err != nil {
		be.Close()
		return nil, err
	}
	if !cfg.MigrateTLS {
		// Plain migration is only ever chosen by this flag: say so once, loudly.
		log.Warn("live migrations are not encrypted (--migrate-tls=false): guest RAM and disks cross the network in the clear")
	}
	return be, nil
}

// libvirtHosts reads the hosts from --hosts or --connect.
func libvirtHosts(cfg config) ([]libvirt.Host, error) {
	if cfg.HostsFile == "" {
		return libvirt.ParseConnect(cfg.Connect, cfg.DefaultZone)
	}
	f, err := hostsfile.Load(cfg.HostsFile)
	if err != nil {
		return nil, err
	}
	if h := f.HasFake(); h != nil {
		return nil, fmt.Errorf("--hosts %s:%d: host %q: fake: only the fake backend reads it (--use-fake-backend); remove the block for real hosts",
			f.Path, h.Line, h.Name)
	}
	hosts := make([]libvirt.Host, 0, len(f.Hosts))
	for _, h := range f.Hosts {
		hosts = append(hosts, libvirt.Host{Zone: h.Zone, URI: h.URI, Name: h.Name, Named: true, Enforce: true,
			Labels: h.Labels, CPUOvercommit: h.Overcommit.CPU, MemoryOvercommit: h.Overcommit.Memory, Cordoned: h.Cordoned})
	}
	return hosts, nil
}
