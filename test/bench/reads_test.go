package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// readWindow is how long the 64 Get clients run at each fleet size; the
// figure is ok Gets over that window.
const readWindow = 5 * time.Second

// fullLists is how many full Lists are timed per size (the p50 is reported).
const fullLists = 5

// BenchmarkFleet measures, per fleet size, every read figure of issue 13 on
// one state file: its size, a restart on it (launch → first answered
// List), Get throughput and latency under 64 clients, full List latency and
// bytes (decoded by the client, as BigFleet does, and raw: the server's
// share) and a delta List after 100 mutations.
func BenchmarkFleet(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			state := filepath.Join(b.TempDir(), "state.db")
			first := start(b, sz.n, state)
			first.stop() // the state file is complete and closed
			st, err := os.Stat(state)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			t0 := time.Now()
			p := launch(b, sz.n, state)
			p.waitReady(b, 5*time.Millisecond)
			boot := time.Since(t0)
			if _, err := p.listRaw(context.Background(), &pb.ListFilter{}); err != nil {
				b.Fatal(err)
			}
			bootFull := time.Since(t0)
			ids := p.ids(b)
			cpu0 := p.cpuTime(b)
			okPerSec, p50, p99 := getLoad(b, p, ids, false)
			getCPU := p.cpuTime(b) - cpu0
			polledOK, _, polledP99 := getLoad(b, p, ids, true)
			full, raw, bytes := fullListTimes(b, p, sz.n)
			deltaLat, deltaBytes := deltaList(b, p, ids[:100])
			b.StopTimer()
			b.ReportMetric(float64(st.Size())/1e6, "state-MB")
			b.ReportMetric(boot.Seconds(), "boot-s")
			b.ReportMetric(bootFull.Seconds(), "boot-to-full-list-s")
			b.ReportMetric(okPerSec, "get-ok/s")
			b.ReportMetric(ms(p50), "get-p50-ms")
			b.ReportMetric(ms(p99), "get-p99-ms")
			// The provider's own CPU per ok Get (the client's is not counted).
			b.ReportMetric(float64(getCPU.Microseconds())/(okPerSec*readWindow.Seconds()), "get-server-cpu-us")
			b.ReportMetric(polledOK, "get-ok/s-polled")
			b.ReportMetric(ms(polledP99), "get-p99-ms-polled")
			b.ReportMetric(ms(full), "full-list-p50-ms")
			b.ReportMetric(ms(raw), "full-list-raw-p50-ms")
			b.ReportMetric(float64(bytes)/1e6, "full-list-MB")
			b.ReportMetric(ms(deltaLat), "delta-ms")
			b.ReportMetric(float64(deltaBytes)/1e3, "delta-kB")
			b.ReportMetric(float64(p.rssKiB(b))/1024/float64(sz.n)*10_000, "RSS-MiB/10k")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// getLoad runs 64 clients, each on a connection of its own, calling Get
// for readWindow and returns ok calls per second and the latency
// percentiles of those calls. With poll, a 65th client meanwhile polls
// full Lists back to back, as a BigFleet shard does, so the figure shows
// what a List costs the Gets served beside it.
func getLoad(b *testing.B, p *provider, ids []string, poll bool) (okPerSec float64, p50, p99 time.Duration) {
	conns := make([]*grpc.ClientConn, clients)
	for c := range conns {
		conns[c] = p.dial(b)
		defer conns[c].Close()
		if err := get(context.Background(), conns[c], ids[0]); err != nil { // connected before the clock starts
			b.Fatal(err)
		}
	}
	// The window ends by the clock, not by a context: a call's deadline
	// travels to the server (grpc-timeout), which may cut it before the
	// client's context says it expired.
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	var firstErr error // guarded by mu
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(readWindow)
	if poll {
		wg.Go(func() {
			for time.Now().Before(end) {
				if _, err := p.list(ctx, &pb.ListFilter{}); err != nil {
					b.Errorf("polling List: %v", err)
					return
				}
			}
		})
	}
	for c := range clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, 4096)
			for i := c * 7919; time.Now().Before(end); i++ {
				s := time.Now()
				err := get(ctx, conns[c], ids[i%len(ids)])
				if err != nil {
					if failed.Add(1) == 1 {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					continue
				}
				local = append(local, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if n := failed.Load(); n > 0 || len(lat) == 0 {
		b.Fatalf("Get: %d failed (first: %v), %d ok", n, firstErr, len(lat))
	}
	slices.Sort(lat)
	return float64(len(lat)) / elapsed.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100]
}

// fullListTimes returns the median of fullLists full Lists decoded by the
// client, the median of as many undecoded ones, and the answer's size.
func fullListTimes(b *testing.B, p *provider, n int) (decoded, raw time.Duration, size int) {
	ctx := context.Background()
	var dec, rw []time.Duration
	for range fullLists {
		t0 := time.Now()
		l, err := p.list(ctx, &pb.ListFilter{})
		dec = append(dec, time.Since(t0))
		if err != nil || len(l.Machines) != n {
			b.Fatalf("full list: %v (%d machines, want %d)", err, len(l.Machines), n)
		}
		size = proto.Size(l)
		t0 = time.Now()
		bs, err := p.listRaw(ctx, &pb.ListFilter{})
		rw = append(rw, time.Since(t0))
		if err != nil || len(bs) != size {
			b.Fatalf("raw full list: %v (%d bytes, decoded one re-encodes to %d)", err, len(bs), size)
		}
	}
	slices.Sort(dec)
	slices.Sort(rw)
	return dec[len(dec)/2], rw[len(rw)/2], size
}

// deltaList creates the given machines, then times a List since the
// revision a full List returned before.
func deltaList(b *testing.B, p *provider, ids []string) (time.Duration, int) {
	ctx := context.Background()
	all, err := p.list(ctx, &pb.ListFilter{})
	if err != nil {
		b.Fatal(err)
	}
	cursor := all.Revision
	for _, id := range ids {
		if err := p.create(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the instant fake complete them
	t0 := time.Now()
	delta, err := p.list(ctx, &pb.ListFilter{SinceRevision: cursor})
	d := time.Since(t0)
	if err != nil || len(delta.Machines) != len(ids) {
		b.Fatalf("delta list: %v (%d machines, want %d)", err, len(delta.Machines), len(ids))
	}
	return d, proto.Size(delta)
}
