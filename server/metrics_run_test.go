package server

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// seriesValue reads one series of a gathered family by its labels.
func seriesValue(t *testing.T, m *Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return value(s), true
		}
	}
	return 0, false
}

func value(s *dto.Metric) float64 {
	if s.GetGauge() != nil {
		return s.GetGauge().GetValue()
	}
	return s.GetCounter().GetValue()
}

// TestNotRunningMetrics: the gauge follows each reconcile of a zone (0
// once it clears, untouched for a zone not listed) and restarts count.
func TestNotRunningMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	m.DomainsNotRunning(map[string]map[string]int{"a": {"shutoff": 2}, "b": {}})
	m.DomainRestarted("a", "crashed", true)
	m.DomainRestarted("a", "crashed", false)
	m.DomainRestarted("a", "crashed", true)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"machines_not_running", map[string]string{"zone": "a", "state": "shutoff"}, 2},
		{"machines_not_running", map[string]string{"zone": "b", "state": "shutoff"}, 0},
		{"machines_not_running", map[string]string{"zone": "a", "state": "paused"}, 0},
		{"machine_restarts_total", map[string]string{"zone": "a", "from": "crashed", "outcome": "ok"}, 2},
		{"machine_restarts_total", map[string]string{"zone": "a", "from": "crashed", "outcome": "failed"}, 1},
	} {
		if got, ok := seriesValue(t, m, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	m.DomainsNotRunning(map[string]map[string]int{"a": {}}) // b not listed this time
	if got, _ := seriesValue(t, m, "machines_not_running", map[string]string{"zone": "a", "state": "shutoff"}); got != 0 {
		t.Errorf("cleared zone still shows %v", got)
	}
}

// TestMigrationRecoveryMetrics: each recovery counts once by zone and
// outcome, and the metrics are the engine's MigrationRecoveryObserver.
func TestMigrationRecoveryMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	var _ lifecycle.MigrationRecoveryObserver = m
	m.MigrationRecovered("a", "completed")
	m.MigrationRecovered("a", "resumed")
	m.MigrationRecovered("a", "resumed")
	for outcome, want := range map[string]float64{"completed": 1, "resumed": 2} {
		if got, ok := seriesValue(t, m, "migration_recoveries_total", map[string]string{"zone": "a", "outcome": outcome}); !ok || got != want {
			t.Errorf("migration_recoveries_total{a,%s} = %v (present %v), want %v", outcome, got, ok, want)
		}
	}
}

// TestDuplicateMetrics: each duplicate reconcile meets counts once by
// zone and outcome, and the metrics are the engine's DuplicateObserver.
func TestDuplicateMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	var _ lifecycle.DuplicateObserver = m
	m.DuplicateDomain("a", "removed")
	m.DuplicateDomain("a", "kept")
	m.DuplicateDomain("a", "kept")
	for outcome, want := range map[string]float64{"removed": 1, "kept": 2} {
		if got, ok := seriesValue(t, m, "duplicate_domains_total", map[string]string{"zone": "a", "outcome": outcome}); !ok || got != want {
			t.Errorf("duplicate_domains_total{a,%s} = %v (present %v), want %v", outcome, got, ok, want)
		}
	}
}

// TestWaitingOnUnlistedMetrics: each deferred decision counts once per
// pass by zone and decision, and the metrics are the engine's WaitObserver.
func TestWaitingOnUnlistedMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	var _ lifecycle.WaitObserver = m
	m.WaitingOnUnlisted("a", "migration_recovery")
	m.WaitingOnUnlisted("a", "migration_recovery")
	m.WaitingOnUnlisted("a", "duplicate_removal")
	for decision, want := range map[string]float64{"migration_recovery": 2, "duplicate_removal": 1} {
		if got, ok := seriesValue(t, m, "reconcile_waiting_on_unlisted_total", map[string]string{"zone": "a", "decision": decision}); !ok || got != want {
			t.Errorf("reconcile_waiting_on_unlisted_total{a,%s} = %v (present %v), want %v", decision, got, ok, want)
		}
	}
}
