package bench

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
