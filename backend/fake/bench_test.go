package fake

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// BenchmarkFakeCreate: 64 concurrent Creates (each followed by its
// Delete) against a fake backend of 1,000 hosts in one zone: the
// placement decision plus the fake's own bookkeeping. Reported: Creates/s
// and the p50/p99 latency of one Create.
func BenchmarkFakeCreate(b *testing.B) {
	hosts := make([]Host, 1000)
	for i := range hosts {
		hosts[i] = Host{Name: fmt.Sprintf("kvm-%04d", i), Zone: "zone-a", VCPUs: 64, MemoryMiB: 256 * 1024, PoolGiB: 1024}
	}
	be := New(Options{Hosts: hosts})
	ctx := context.Background()
	var mu sync.Mutex
	var all []time.Duration
	var seq atomic.Int64
	b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := seq.Add(1)
		lat := make([]time.Duration, 0, 1024)
		for i := 0; pb.Next(); i++ {
			id := fmt.Sprintf("w%d-%d", g, i)
			t0 := time.Now()
			_, err := be.Create(ctx, backend.MachineSpec{MachineID: id, Zone: "zone-a", VCPU: 2, MemoryMiB: 4096})
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Error(err)
				return
			}
			if err := be.Delete(ctx, backend.DeleteSpec{MachineID: id, Zone: "zone-a"}); err != nil {
				b.Error(err)
				return
			}
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	pct := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "creates/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
