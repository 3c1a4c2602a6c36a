package admin

import (
	"cmp"
	"context"
	"slices"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

const mib = 1 << 20

// hostName is a host's stable name; a backend that names none (a zone of
// one host, before hosts had names) has the zone's name for it, as
// --connect hosts do.
func hostName(h backend.HostStatus) string { return cmp.Or(h.Name, h.Zone) }

// machineHost is the name of the host a machine's VM is on, "" while it
// has none. A placement without a host name is the only host of its zone,
// which is named after the zone.
func machineHost(m record.Machine) string {
	if m.Domain == "" {
		return ""
	}
	return cmp.Or(m.HostName, m.Zone)
}

func (s *Service) ListHosts(ctx context.Context, _ *connect.Request[adminv1.ListHostsRequest]) (*connect.Response[adminv1.ListHostsResponse], error) {
	hosts, err := s.hosts(ctx)
	if err != nil {
		return nil, convert.WireError(err)
	}
	return connect.NewResponse(&adminv1.ListHostsResponse{Hosts: hosts}), nil
}

// hosts maps every host the backend reports, sorted by zone then name,
// with the machine records of its zone and those placed on it.
func (s *Service) hosts(ctx context.Context) ([]*adminv1.Host, error) {
	rep := s.eng.LastReconcile()
	perZone := map[string]int32{}
	for k, n := range s.eng.Counts() {
		perZone[k.Zone] += int32(n)
	}
	perHost, err := s.machinesPerHost(ctx)
	if err != nil {
		return nil, err
	}
	cordons, downs := s.cordons.snapshot(), s.downs.snapshot()
	var out []*adminv1.Host
	for _, h := range s.eng.Backend().Hosts(ctx) {
		ph := hostToProto(h, perZone[h.Zone], rep)
		ph.HostMachineCount = perHost[ph.Name]
		ph.Cordon = cordonToProto(ph, cordons)
		ph.Down = downToProto(h, ph.Name, downs)
		ph.State = hostState(ph)
		out = append(out, ph)
	}
	slices.SortFunc(out, func(a, b *adminv1.Host) int {
		return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// machinesPerHost counts the machine records whose VM is on each host.
// SPECULATIVE slots have no VM, so they are not even listed.
func (s *Service) machinesPerHost(ctx context.Context) (map[string]int32, error) {
	res, err := s.eng.List(ctx, record.ListQuery{States: record.AllStates[1:]})
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, m := range res.Machines {
		if h := machineHost(m); h != "" {
			out[h]++
		}
	}
	return out, nil
}

// host returns one host by name, or nil when the backend reports none.
func (s *Service) host(ctx context.Context, name string) (*adminv1.Host, error) {
	hosts, err := s.hosts(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return nil, nil
}

func hostToProto(h backend.HostStatus, machines int32, rep lifecycle.ReconcileReport) *adminv1.Host {
	out := &adminv1.Host{
		Name:                hostName(h),
		Zone:                h.Zone,
		Labels:              h.Labels,
		Cordoned:            h.Cordoned,
		Uri:                 RedactURI(h.URI),
		Connected:           h.Connected,
		LastError:           h.LastError,
		LibvirtVersion:      h.LibvirtVersion,
		HypervisorVersion:   h.HypervisorVersion,
		PoolCapacityBytes:   h.PoolCapacity,
		PoolAllocationBytes: h.PoolAllocation,
		DomainCount:         int32(h.DomainCount),
		MachineCount:        machines,
		LastReconcileTime:   ts(rep.At),
		DomainType:          h.DomainType,
		DomainTypeNote:      h.DomainTypeNote,
		Capacity:            capacityToProto(h.Capacity),
	}
	switch zerr, ok := rep.Zones[h.Zone]; {
	case !ok:
		out.LastReconcileOutcome = "not reconciled yet"
	case zerr == "":
		out.LastReconcileOutcome = "ok"
	default:
		out.LastReconcileOutcome = zerr
	}
	return out
}

// capacityToProto computes what placement fills up to (size × overcommit)
// and what is left of it; an overcommit of 0 (not enforced) leaves both 0.
func capacityToProto(c backend.HostCapacity) *adminv1.HostCapacity {
	out := &adminv1.HostCapacity{
		Vcpus:            int32(c.VCPUs),
		CpuOvercommit:    c.CPUOvercommit,
		VcpusUsed:        int32(c.UsedVCPUs),
		MemoryBytes:      bytesOf(c.MemoryMiB),
		MemoryOvercommit: c.MemoryOvercommit,
		MemoryUsedBytes:  bytesOf(c.UsedMemoryMiB),
		MemoryFreeBytes:  bytesOf(c.FreeMemoryMiB),
		PoolFreeBytes:    c.PoolFreeBytes,
		Machines:         int32(c.Machines),
	}
	if c.CPUOvercommit > 0 {
		out.VcpusPlaceable = int32(float64(c.VCPUs) * c.CPUOvercommit)
		out.VcpusAvailable = max(out.VcpusPlaceable-out.VcpusUsed, 0)
	}
	if c.MemoryOvercommit > 0 {
		placeable := int64(float64(c.MemoryMiB) * c.MemoryOvercommit)
		out.MemoryPlaceableBytes = bytesOf(placeable)
		out.MemoryAvailableBytes = bytesOf(placeable - c.UsedMemoryMiB)
	}
	return out
}

// bytesOf converts MiB to bytes; negative (never expected) is 0.
func bytesOf(mebibytes int64) uint64 {
	if mebibytes <= 0 {
		return 0
	}
	return uint64(mebibytes) * mib
}
