package bench

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

const clients = 64

var sizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"10k", 10_000}, {"100k", 100_000}}

// BenchmarkDurableMutations: accepted durable mutations per second, 64
// concurrent grpc-go clients, --state on disk. Each client owns a slice of
// the fleet and alternates Create and Delete on it; every accepted call is
// one fenced, durable acceptance (plus the background completion write).
func BenchmarkDurableMutations(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			p := start(b, sz.n, filepath.Join(b.TempDir(), "state.db"))
			ids := p.ids(b)
			var accepted, refused atomic.Int64
			d := 5 * time.Second
			b.ResetTimer()
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var wg sync.WaitGroup
			for c := range clients {
				mine := ids[c*len(ids)/clients : (c+1)*len(ids)/clients]
				wg.Go(func() { churn(ctx, p, mine, &accepted, &refused) })
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(accepted.Load())/d.Seconds(), "accepted/s")
			b.ReportMetric(float64(refused.Load())/d.Seconds(), "refused/s")
		})
	}
}

func churn(ctx context.Context, p *provider, mine []string, accepted, refused *atomic.Int64) {
	created := make([]bool, len(mine))
	for i := 0; ctx.Err() == nil; i = (i + 1) % len(mine) {
		var err error
		if created[i] {
			err = p.delete(ctx, mine[i])
		} else {
			err = p.create(ctx, mine[i])
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			accepted.Add(1)
			created[i] = !created[i]
		default:
			refused.Add(1) // e.g. still CREATING: Aborted, nothing written but the call
		}
	}
}

// BenchmarkGet: Get latency percentiles under 64 concurrent clients.
func BenchmarkGet(b *testing.B) {
	p := start(b, 10_000, filepath.Join(b.TempDir(), "state.db"))
	ids := p.ids(b)
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, 2000)
			for i := range 2000 {
				t0 := time.Now()
				if err := p.get(context.Background(), ids[(c*2000+i)%len(ids)]); err != nil {
					b.Error(err)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkList: a full List (latency, bytes) and a delta List after 100
// mutations, at each fleet size.
func BenchmarkList(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			p := start(b, sz.n, filepath.Join(b.TempDir(), "state.db"))
			ctx := context.Background()
			b.ResetTimer()
			t0 := time.Now()
			full, err := p.list(ctx, &pb.ListFilter{})
			fullLat := time.Since(t0)
			if err != nil || len(full.Machines) != sz.n {
				b.Fatalf("full list: %v (%d machines)", err, len(full.Machines))
			}
			for _, m := range full.Machines[:100] {
				if err := p.create(ctx, m.Id); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(200 * time.Millisecond) // let the instant fake complete them
			t0 = time.Now()
			delta, err := p.list(ctx, &pb.ListFilter{SinceRevision: full.Revision})
			deltaLat := time.Since(t0)
			if err != nil || len(delta.Machines) != 100 {
				b.Fatalf("delta list: %v (%d machines)", err, len(delta.Machines))
			}
			b.StopTimer()
			b.ReportMetric(float64(fullLat.Microseconds())/1000, "full-ms")
			b.ReportMetric(float64(proto.Size(full))/1e6, "full-MB")
			b.ReportMetric(float64(deltaLat.Microseconds())/1000, "delta-ms")
			b.ReportMetric(float64(proto.Size(delta))/1e3, "delta-kB")
			b.ReportMetric(float64(p.rssKiB(b))/1024/float64(sz.n)*10_000, "RSS-MiB/10k")
		})
	}
}
