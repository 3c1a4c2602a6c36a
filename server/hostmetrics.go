package server

import (
	"cmp"
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bigfleet/libvirt-provider/backend"
)

// HostsFunc reports every host with its capacity; backend.Backend.Hosts
// fits. The host gauges call it in the background (HostCache), never at
// scrape time, with a bounded context.
type HostsFunc func(ctx context.Context) []backend.HostStatus

// hostReadTimeout bounds one read of the hosts: a dead host must not hold
// the read (its series then show what the backend knew).
const hostReadTimeout = 5 * time.Second

const mib = 1 << 20

var hostLabels = []string{"zone", "host"}

// The per-host gauges. Memory is in bytes, as Prometheus convention
// wants; "placeable" is the size times the overcommit ratio, what
// placement fills up to (0 where capacity is not enforced).
var (
	hostConnectedDesc = prometheus.NewDesc("host_connected",
		"1 while the host's libvirt connection is up, 0 while it is not.", hostLabels, nil)
	hostCordonedDesc = prometheus.NewDesc("host_cordoned",
		"1 while the host is cordoned (no new placements), else 0.", hostLabels, nil)
	hostDownDesc = prometheus.NewDesc("host_down",
		"1 while the operator declares the host down (off or fenced for sure: libvirtctl down), else 0.", hostLabels, nil)
	hostVCPUsDesc = prometheus.NewDesc("host_vcpus",
		"Logical CPUs of the host, as libvirt reports them (0 until read).", hostLabels, nil)
	hostVCPUsPlaceableDesc = prometheus.NewDesc("host_vcpus_placeable",
		"vCPUs placement may fill the host with: host_vcpus times the CPU overcommit ratio (0: not enforced).", hostLabels, nil)
	hostVCPUsUsedDesc = prometheus.NewDesc("host_vcpus_used",
		"vCPUs the provider's VMs on the host are sized to use, in-flight reservations included.", hostLabels, nil)
	hostMemoryDesc = prometheus.NewDesc("host_memory_bytes",
		"Memory of the host, as libvirt reports it (0 until read).", hostLabels, nil)
	hostMemoryPlaceableDesc = prometheus.NewDesc("host_memory_placeable_bytes",
		"Memory placement may fill the host with: host_memory_bytes times the memory overcommit ratio (0: not enforced).", hostLabels, nil)
	hostMemoryUsedDesc = prometheus.NewDesc("host_memory_used_bytes",
		"Memory the provider's VMs on the host are sized to use, in-flight reservations included.", hostLabels, nil)
	hostMemoryFreeDesc = prometheus.NewDesc("host_memory_free_bytes",
		"Free memory as the host reports it (every guest counted, ours or not).", hostLabels, nil)
	hostPoolFreeDesc = prometheus.NewDesc("host_pool_free_bytes",
		"Free space of the host's storage pool.", hostLabels, nil)
	hostMachinesDesc = prometheus.NewDesc("host_machines",
		"The provider's VMs on the host, in-flight reservations included.", hostLabels, nil)
	hostLinkTimeoutsDesc = prometheus.NewDesc("host_link_timeouts",
		"1 while the host's network connection has TCP timeouts on its socket, 0 while it runs without (a dead link is then found only by keepalive or the watchdog, and calls on it keep their threads until TCP gives up); absent for a local host.", hostLabels, nil)
	hostCallsInsideDesc = prometheus.NewDesc("host_libvirt_calls_inside",
		"Calls (and watchdog pings) to the host inside libvirt now, over all its connections, abandoned ones included: the threads it holds.", hostLabels, nil)
	hostCallsAbandonedDesc = prometheus.NewDesc("host_libvirt_calls_abandoned",
		"Calls to the host abandoned at their bound (--libvirt-call-timeout) and still inside libvirt.", hostLabels, nil)
)

// RegisterHostCapacity adds the per-host capacity, cordon and down gauges,
// labelled by zone and host, served from a HostCache of hosts: a scrape
// reads the last snapshot and never hosts itself. The cache is read again
// after every reconcile pass (DomainsNotRunning); the caller reads it once
// at start, after each cordon change, and closes it before the backend.
// Until the first read has finished the gauges are absent, not 0: no host
// is known to be down or empty yet.
func (m *Metrics) RegisterHostCapacity(hosts HostsFunc) *HostCache {
	c := NewHostCache(hosts, hostReadTimeout)
	m.Registry.MustRegister(hostCapacityCollector{cache: c})
	m.hostCache.Store(c)
	return c
}

type hostCapacityCollector struct{ cache *HostCache }

func (hostCapacityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{hostConnectedDesc, hostCordonedDesc, hostDownDesc, hostVCPUsDesc, hostVCPUsPlaceableDesc,
		hostVCPUsUsedDesc, hostMemoryDesc, hostMemoryPlaceableDesc, hostMemoryUsedDesc, hostMemoryFreeDesc,
		hostPoolFreeDesc, hostMachinesDesc, hostLinkTimeoutsDesc, hostCallsInsideDesc, hostCallsAbandonedDesc} {
		ch <- d
	}
}

func (c hostCapacityCollector) Collect(ch chan<- prometheus.Metric) {
	hosts, _ := c.cache.Snapshot()
	for _, h := range hosts {
		// A --connect host without a name is named after its zone.
		zone, name := h.Zone, cmp.Or(h.Name, h.Zone)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, zone, name)
		}
		cp := h.Capacity
		gauge(hostConnectedDesc, boolGauge(h.Connected))
		gauge(hostCordonedDesc, boolGauge(h.Cordoned))
		gauge(hostDownDesc, boolGauge(h.Down))
		gauge(hostVCPUsDesc, float64(cp.VCPUs))
		gauge(hostVCPUsPlaceableDesc, math.Floor(float64(cp.VCPUs)*cp.CPUOvercommit)) // whole vCPUs, as placement counts
		gauge(hostVCPUsUsedDesc, float64(cp.UsedVCPUs))
		gauge(hostMemoryDesc, float64(cp.MemoryMiB)*mib)
		gauge(hostMemoryPlaceableDesc, float64(cp.MemoryMiB)*cp.MemoryOvercommit*mib)
		gauge(hostMemoryUsedDesc, float64(cp.UsedMemoryMiB)*mib)
		gauge(hostMemoryFreeDesc, float64(cp.FreeMemoryMiB)*mib)
		gauge(hostPoolFreeDesc, float64(cp.PoolFreeBytes))
		gauge(hostMachinesDesc, float64(cp.Machines))
		if h.LinkTimeouts != "" { // a network host, once connected
			gauge(hostLinkTimeoutsDesc, boolGauge(h.LinkTimeouts == "set"))
		}
		gauge(hostCallsInsideDesc, float64(h.CallsInside))
		gauge(hostCallsAbandonedDesc, float64(h.CallsAbandoned))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
