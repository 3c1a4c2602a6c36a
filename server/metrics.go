package server

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// CountsFunc reports how many machines are in each (state, zone). It is
// called at scrape time, so the gauge is never stale and costs nothing
// between scrapes.
type CountsFunc func(emit func(state record.State, zone string, n int))

// Metrics owns an isolated Prometheus registry: nothing registers into the
// global default, so two providers (or two tests) in one process never
// collide, and /metrics shows exactly what this provider exports.
type Metrics struct {
	Registry *prometheus.Registry

	rpcs        *prometheus.CounterVec
	rpcLatency  *prometheus.HistogramVec
	panics      prometheus.Counter
	transitions *prometheus.HistogramVec
	commits     prometheus.Histogram
	commitSize  prometheus.Histogram
	notRunning  *prometheus.GaugeVec
	restarts    *prometheus.CounterVec
	gaveUp      *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	recoveries  *prometheus.CounterVec
	waiting     *prometheus.CounterVec
	fenceRuns   *prometheus.CounterVec
	hot         map[string]*atomic.Pointer[rpcSeries] // rpcmetrics.go
	hostCache   atomic.Pointer[HostCache]             // hostmetrics.go; nil: no host gauges
}

var (
	_ lifecycle.RunObserver     = (*Metrics)(nil)
	_ lifecycle.RestartObserver = (*Metrics)(nil)
	_ lifecycle.WaitObserver    = (*Metrics)(nil)
)

// NewMetrics builds the registry with the RPC, panic, transition and store
// series, plus the Go runtime and process collectors. counts may be nil
// (no machines gauge).
func NewMetrics(counts CountsFunc) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rpc_requests_total",
			Help: "RPCs handled, by procedure and final code (ok or the Connect/gRPC code name).",
		}, []string{"method", "code"}),
		rpcLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rpc_duration_seconds",
			Help:    "RPC handling latency by procedure.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "panics_recovered_total",
			Help: "Panics in RPC handlers recovered and answered with Internal.",
		}),
		transitions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "transition_duration_seconds",
			Help:    "Duration of finished lifecycle transitions by kind, zone and outcome.",
			Buckets: []float64{.1, .5, 1, 5, 15, 30, 60, 120, 300, 600, 1200},
		}, []string{"kind", "zone", "outcome"}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "store_commit_duration_seconds",
			Help:    "Latency of durable store commits (one fsync may serve several batches).",
			Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "store_commit_records",
			Help:    "Records (machines + fence marks) made durable by one store transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024},
		}),
		notRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "machines_not_running",
			Help: "IDLE or CONFIGURED machines whose domain reconcile found not running, by zone and run state (shutoff, crashed, paused, ...); set by each reconcile of the zone.",
		}, []string{"zone", "state"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "machine_restarts_total",
			Help: "Stopped domains of IDLE machines that reconcile started again, by zone, the run state they were in and outcome (ok, failed).",
		}, []string{"zone", "from", "outcome"}),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "machine_restarts_gave_up_total",
			Help: "IDLE machines whose domain reconcile stopped restarting, by zone: it stopped again after --restart-max-tries restarts (the machine's last_error says so).",
		}, []string{"zone"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "duplicate_domains_total",
			Help: "Copies of one machine's domain found on a second host of its zone by reconcile, by zone and outcome: removed (never bound, the kept copy running), kept (no such proof: reported each pass until an operator acts), failed (the removal did not finish).",
		}, []string{"zone", "outcome"}),
		waiting: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconcile_waiting_on_unlisted_total",
			Help: "Reconcile decisions deferred because hosts of the zone were not listed (a copy of the machine may be there), by zone and decision: migration_recovery, duplicate_removal, leftover_removal. Counted each pass a decision waits.",
		}, []string{"zone", "decision"}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "migration_recoveries_total",
			Help: "Live migrations interrupted by a provider stop that reconcile recovered from libvirt's state, by zone and outcome: completed (the destination ran the guest; the source's copy was removed), resumed (the paused source was resumed), running (a running copy was kept).",
		}, []string{"zone", "outcome"}),
		fenceRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fence_command_runs_total",
			Help: "Runs of --fence-command for hosts unreachable past --host-down-after, by host and result: ok (the host was declared down), failed (the command failed or passed --fence-timeout), declare-failed (it succeeded but the declaration could not be saved).",
		}, []string{"host", "result"}),
		hot: newHotSeries(),
	}
	m.Registry.MustRegister(m.rpcs, m.rpcLatency, m.panics, m.transitions, m.commits, m.commitSize,
		m.notRunning, m.restarts, m.gaveUp, m.duplicates, m.recoveries, m.waiting, m.fenceRuns,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if counts != nil {
		m.Registry.MustRegister(&machinesCollector{counts: counts})
	}
	return m
}

// ObserveFence counts one run of the fence command (hostfence.Config.Observe).
func (m *Metrics) ObserveFence(host, result string) {
	m.fenceRuns.WithLabelValues(host, result).Inc()
}

// TransitionFinished implements lifecycle.Observer.
func (m *Metrics) TransitionFinished(kind record.OpKind, zone, outcome string, d time.Duration) {
	m.transitions.WithLabelValues(string(kind), zone, outcome).Observe(d.Seconds())
}

// notRunningStates are the gauge's state labels, each set (0 included)
// for every zone a reconcile listed, so a state that clears shows 0.
var notRunningStates = []string{backend.RunShutoff, backend.RunCrashed, backend.RunPaused,
	backend.RunShutdown, backend.RunSuspended, backend.RunNoState}

// DomainsNotRunning implements lifecycle.RunObserver. Zones whose listing
// failed are absent and keep their last values (unknown is not zero).
// Called once at the end of every reconcile pass, it also has the host
// gauges' snapshot read again, in the background: the pass must not wait
// for the hosts.
func (m *Metrics) DomainsNotRunning(byZone map[string]map[string]int) {
	if c := m.hostCache.Load(); c != nil {
		c.Refresh()
	}
	for zone, states := range byZone {
		for _, st := range notRunningStates {
			m.notRunning.WithLabelValues(zone, st).Set(float64(states[st]))
		}
	}
}

// DomainRestarted implements lifecycle.RunObserver.
func (m *Metrics) DomainRestarted(zone, from string, ok bool) {
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	m.restarts.WithLabelValues(zone, from, outcome).Inc()
}

// RestartGaveUp implements lifecycle.RestartObserver.
func (m *Metrics) RestartGaveUp(zone string) { m.gaveUp.WithLabelValues(zone).Inc() }

// DuplicateDomain implements lifecycle.DuplicateObserver.
func (m *Metrics) DuplicateDomain(zone, outcome string) {
	m.duplicates.WithLabelValues(zone, outcome).Inc()
}

// WaitingOnUnlisted implements reconcile.WaitObserver.
func (m *Metrics) WaitingOnUnlisted(zone, decision string) {
	m.waiting.WithLabelValues(zone, decision).Inc()
}

// MigrationRecovered implements lifecycle.MigrationRecoveryObserver.
func (m *Metrics) MigrationRecovered(zone, outcome string) {
	m.recoveries.WithLabelValues(zone, outcome).Inc()
}

// StoreCommitted is shaped for the bbolt store's OnCommit hook: one call
// per durable transaction with its duration and record count.
func (m *Metrics) StoreCommitted(d time.Duration, records int) {
	m.commits.Observe(d.Seconds())
	m.commitSize.Observe(float64(records))
}

var machinesDesc = prometheus.NewDesc("machines",
	"Machines by lifecycle state and zone.", []string{"state", "zone"}, nil)

// machinesCollector asks the engine at scrape time. Every state of every
// zone seen is emitted, zero included, so a state that empties shows 0
// rather than vanishing from dashboards.
type machinesCollector struct{ counts CountsFunc }

func (c *machinesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machinesDesc }

func (c *machinesCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		s record.State
		z string
	}
	got := map[key]int{}
	zones := map[string]bool{}
	c.counts(func(s record.State, z string, n int) {
		got[key{s, z}] += n
		zones[z] = true
	})
	for z := range zones {
		for _, s := range record.AllStates {
			ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue,
				float64(got[key{s, z}]), s.String(), z)
		}
	}
}

var hostUpDesc = prometheus.NewDesc("host_up",
	"1 while the zone's libvirt host is connected, 0 while it is not (mutations there answer Unavailable).",
	[]string{"zone"}, nil)

// HostsUpFunc reports, per zone, whether its host is reachable right now.
type HostsUpFunc func() map[string]bool

// RegisterHostsUp adds the host_up gauge, read at scrape time.
func (m *Metrics) RegisterHostsUp(up HostsUpFunc) {
	m.Registry.MustRegister(hostsCollector{up: up})
}

type hostsCollector struct{ up HostsUpFunc }

func (c hostsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- hostUpDesc }

func (c hostsCollector) Collect(ch chan<- prometheus.Metric) {
	for zone, up := range c.up() {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(hostUpDesc, prometheus.GaugeValue, v, zone)
	}
}

var hostDomainTypeDesc = prometheus.NewDesc("host_domain_type",
	"1 for the domain type (type label: kvm, or qemu for TCG) the zone's host runs new guests under; absent until the host connected.",
	[]string{"zone", "type"}, nil)

// DomainTypesFunc reports, per zone, the domain type its host uses ("" unknown).
type DomainTypesFunc func() map[string]string

// RegisterHostDomainTypes adds the host_domain_type gauge, read at scrape time.
func (m *Metrics) RegisterHostDomainTypes(f DomainTypesFunc) {
	m.Registry.MustRegister(domainTypesCollector{f: f})
}

type domainTypesCollector struct{ f DomainTypesFunc }

func (c domainTypesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- hostDomainTypeDesc }

func (c domainTypesCollector) Collect(ch chan<- prometheus.Metric) {
	for zone, typ := range c.f() {
		if typ != "" {
			ch <- prometheus.MustNewConstMetric(hostDomainTypeDesc, prometheus.GaugeValue, 1, zone, typ)
		}
	}
}

// ShardLimitFunc reports the bound on distinct shards with fence marks on
// one machine and how many first contacts it has refused since start.
type ShardLimitFunc func() (limit int, refused int64)

// RegisterShardLimit adds fence_shards_per_machine_limit and
// fence_shard_limit_refused_total, read at scrape time.
func (m *Metrics) RegisterShardLimit(f ShardLimitFunc) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fence_shards_per_machine_limit",
			Help: "How many distinct shards may hold fence marks on one machine.",
		}, func() float64 { l, _ := f(); return float64(l) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fence_shard_limit_refused_total",
			Help: "Calls refused with ResourceExhausted because they were a new shard's first contact with a machine whose fence marks were already at fence_shards_per_machine_limit (the admin API's ListFenceMarks lists the busiest machines).",
		}, func() float64 { _, r := f(); return float64(r) }))
}
