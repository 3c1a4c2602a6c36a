package server

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// rpcSeries is one procedure's "ok" counter and latency histogram,
// resolved on its first successful call and kept: WithLabelValues hashes
// the labels and allocates on every call, which a read polled thousands of
// times a second should not pay.
type rpcSeries struct {
	ok      prometheus.Counter
	latency prometheus.Observer
}

// hotProcedures are the procedures whose successful calls take the cached
// series: the provider's own and the health probe. The map is built once
// and only read, so lookups need no lock.
var hotProcedures = []string{
	bigfleetv1alpha1connect.CapacityProviderCreateProcedure,
	bigfleetv1alpha1connect.CapacityProviderConfigureProcedure,
	bigfleetv1alpha1connect.CapacityProviderDrainProcedure,
	bigfleetv1alpha1connect.CapacityProviderDeleteProcedure,
	bigfleetv1alpha1connect.CapacityProviderGetProcedure,
	bigfleetv1alpha1connect.CapacityProviderListProcedure,
	"/grpc.health.v1.Health/Check",
}

func newHotSeries() map[string]*atomic.Pointer[rpcSeries] {
	out := make(map[string]*atomic.Pointer[rpcSeries], len(hotProcedures))
	for _, p := range hotProcedures {
		out[p] = new(atomic.Pointer[rpcSeries])
	}
	return out
}

// observeRPC counts one finished RPC and records its latency. Series are
// created on first use, as before, so /metrics shows no procedure that
// was never called.
func (m *Metrics) observeRPC(method, code string, d time.Duration) {
	if slot := m.hot[method]; slot != nil && code == "ok" {
		s := slot.Load()
		if s == nil {
			s = &rpcSeries{ok: m.rpcs.WithLabelValues(method, code), latency: m.rpcLatency.WithLabelValues(method)}
			slot.Store(s)
		}
		s.ok.Inc()
		s.latency.Observe(d.Seconds())
		return
	}
	m.rpcs.WithLabelValues(method, code).Inc()
	m.rpcLatency.WithLabelValues(method).Observe(d.Seconds())
}
