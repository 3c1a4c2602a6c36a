package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// oneConnWindow is how long each one-connection Get load runs.
const oneConnWindow = 4 * time.Second

// callerCounts are the concurrent callers sharing the one connection.
var callerCounts = []int{1, 16, 64}

// BenchmarkOneConn measures what a BigFleet shard sees (issue 24): all of
// its calls on one grpc-go connection. Per fleet size, in one run:
//
//   - "ceiling": a bare Connect handler on the same HTTP/2 listener
//     (test/bench/ceiling) answering every Get with one pre-encoded Machine;
//   - "ceiling-gcoff": the same with its collector held off (see
//     launchCeiling), the stricter bound;
//   - "ours": ../../bin/libvirt;
//   - "other": $BENCH_BINARY when set (a "before" build, or the reference).
//
// All are started first; each Get load is then run in rounds, every round
// giving each target the same short window in turn, so background load on
// a shared 2-core machine falls on all of them alike and the ratios hold.
// For each: Get ok/s, p50 and p99 with 1, 16 and 64 callers on one
// connection and with 64 callers on a connection each; server CPU per ok
// Get (from /proc, 64 callers on one connection). For the providers also
// the full List p50 (decoded) and, with 64 callers on one connection,
// Create accepts/s, the ack's p50/p99 and what bounds it; for the ceilings
// the same Create churn answered at once (the transport's bound on an ack).
// BENCH_SIZES=1k,100k limits the sizes.
func BenchmarkOneConn(b *testing.B) {
	ceiling := buildCeiling(b)
	type target struct {
		name, bin string
		p         *provider
		ids       []string
		conns     []*grpc.ClientConn // 64, for the comparison row
		metrics   map[string]float64
	}
	mk := func() []*target {
		ts := []*target{{name: "ceiling", bin: ceiling}, {name: "ceiling-gcoff", bin: ceiling}, {name: "ours", bin: "../../bin/libvirt"}}
		if o := os.Getenv("BENCH_BINARY"); o != "" {
			ts = append(ts, &target{name: "other", bin: o})
		}
		return ts
	}
	for _, sz := range sizes {
		if !wantSize(sz.name) {
			continue
		}
		targets := mk()
		b.Run(sz.name, func(b *testing.B) {
			for _, t := range targets {
				t.metrics = map[string]float64{}
				if strings.HasPrefix(t.name, "ceiling") {
					t.p = launchCeiling(b, t.bin, t.name == "ceiling-gcoff")
					t.ids = []string{"certify-fake-z1-000042"}
				} else {
					t.p = startBinary(b, t.bin, sz.n, filepath.Join(b.TempDir(), t.name+".db"))
					t.ids = t.p.ids(b)
				}
				t.conns = make([]*grpc.ClientConn, clients)
				for c := range t.conns {
					t.conns[c] = t.p.dial(b)
					defer t.conns[c].Close()
				}
			}
			type acc struct {
				lat  []time.Duration
				secs float64
				cpu  time.Duration
			}
			load := func(suffix string, callers int, conns func(*target) []*grpc.ClientConn) {
				res := make([]acc, len(targets))
				for range rounds {
					for i, t := range targets {
						c0 := t.p.cpuTime(b)
						lat, el := getLoadOn(b, conns(t), callers, t.ids, oneConnWindow/rounds)
						res[i].cpu += t.p.cpuTime(b) - c0
						res[i].lat = append(res[i].lat, lat...)
						res[i].secs += el.Seconds()
					}
				}
				for i, t := range targets {
					r := res[i]
					slices.Sort(r.lat)
					ok := float64(len(r.lat)) / r.secs
					t.metrics["get-ok/s-"+suffix] = ok
					t.metrics["get-p50-ms-"+suffix] = ms(r.lat[len(r.lat)/2])
					t.metrics["get-p99-ms-"+suffix] = ms(r.lat[len(r.lat)*99/100])
					t.metrics["get-server-cpu-us-"+suffix] = float64(r.cpu.Microseconds()) / float64(len(r.lat))
				}
			}
			for _, n := range callerCounts {
				load(fmt.Sprintf("1conn-%dc", n), n, func(t *target) []*grpc.ClientConn { return []*grpc.ClientConn{t.p.conn} })
			}
			load("64conn", clients, func(t *target) []*grpc.ClientConn { return t.conns })
			for _, t := range targets {
				if strings.HasPrefix(t.name, "ceiling") {
					ceilingWrites(b, t.p, t.metrics)
				} else {
					providerWrites(b, t.p, sz.n, t.ids, t.metrics)
				}
			}
			for _, t := range targets {
				b.Run(t.name, func(b *testing.B) {
					for k, v := range t.metrics {
						b.ReportMetric(v, k)
					}
				})
			}
		})
	}
}

// rounds is how many turns each target gets per Get load.
const rounds = 4

// providerWrites measures a provider's full List and its Creates on one
// connection into m.
func providerWrites(b *testing.B, p *provider, n int, ids []string, m map[string]float64) {
	full, _, _ := fullListTimes(b, p, n)
	m["full-list-p50-ms"] = ms(full)
	m0, c0 := p.scrape(b), p.cpuTime(b)
	accepted, ackP50, ackP99 := createLoad(b, p, ids, oneConnWindow)
	m1, cpu := p.scrape(b), p.cpuTime(b)-c0
	m["create-accepts/s-1conn-64c"] = accepted
	m["create-ack-p50-ms-1conn-64c"] = ms(ackP50)
	m["create-ack-p99-ms-1conn-64c"] = ms(ackP99)
	// What bounds the ack: the server's CPU per accepted Create (the
	// Deletes of the churn included), the time the handler took (the
	// observer's figure: everything but the transport's queueing) and the
	// group commit's pace.
	m["create-server-cpu-us"] = float64(cpu.Microseconds()) / (accepted * oneConnWindow.Seconds())
	m["peak-rss-MiB"] = float64(p.peakRSSKiB(b)) / 1024 // after every load of the run
	d := func(k string) float64 { return m1[k] - m0[k] }
	const create = `rpc_duration_seconds_%s{method="/bigfleet.v1alpha1.CapacityProvider/Create"}`
	if c := d(fmt.Sprintf(create, "count")); c > 0 {
		m["create-handler-mean-ms"] = 1000 * d(fmt.Sprintf(create, "sum")) / c
	}
	if c := d("store_commit_duration_seconds_count"); c > 0 {
		m["store-commit-mean-ms"] = 1000 * d("store_commit_duration_seconds_sum") / c
		m["store-commit-records"] = d("store_commit_records_sum") / c
		m["store-commits/s"] = c / oneConnWindow.Seconds()
	}
}

// ceilingWrites runs the same Create churn against a ceiling, whose Create
// and Delete answer at once with a fixed ack: the transport's own bound on
// a Create's ack with 64 callers on one connection.
func ceilingWrites(b *testing.B, p *provider, m map[string]float64) {
	ids := make([]string, 4*clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("certify-fake-z1-%06d", i)
	}
	c0 := p.cpuTime(b)
	accepted, ackP50, ackP99 := createLoad(b, p, ids, oneConnWindow)
	m["create-accepts/s-1conn-64c"] = accepted
	m["create-ack-p50-ms-1conn-64c"] = ms(ackP50)
	m["create-ack-p99-ms-1conn-64c"] = ms(ackP99)
	m["create-server-cpu-us"] = float64((p.cpuTime(b) - c0).Microseconds()) / (accepted * oneConnWindow.Seconds())
}

func wantSize(name string) bool {
	s := os.Getenv("BENCH_SIZES")
	return s == "" || slices.Contains(strings.Split(s, ","), name)
}

// buildCeiling compiles test/bench/ceiling once per run.
func buildCeiling(tb testing.TB) string {
	out := filepath.Join(tb.TempDir(), "ceiling")
	cmd := exec.Command("go", "build", "-o", out, "./ceiling")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("building the ceiling: %v", err)
	}
	return out
}

// launchCeiling starts the ceiling. With gcOff it runs with GOGC=off and a
// 512 MiB soft memory limit: a bare handler's heap is a few MiB, so by
// default its collector runs every few hundred calls, where a provider
// holding 100k machines collects about once per second; gcOff removes that
// difference (the stricter bound).
func launchCeiling(tb testing.TB, bin string, gcOff bool) *provider {
	addr := freePort(tb)
	cmd := exec.Command(bin, "--addr="+addr)
	cmd.Stderr = os.Stderr
	if gcOff {
		cmd.Env = append(os.Environ(), "GOGC=off", "GOMEMLIMIT=512MiB")
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &provider{cmd: cmd, addr: addr}
	p.conn = p.dial(tb)
	tb.Cleanup(p.stop)
	deadline := time.Now().Add(30 * time.Second)
	for get(context.Background(), p.conn, "x") != nil {
		if time.Now().After(deadline) {
			tb.Fatal("ceiling did not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// startBinary is start with an explicit binary.
func startBinary(tb testing.TB, bin string, n int, state string) *provider {
	tb.Helper()
	old, had := os.LookupEnv("BENCH_BINARY")
	os.Setenv("BENCH_BINARY", bin)
	p := start(tb, n, state)
	if had {
		os.Setenv("BENCH_BINARY", old)
	} else {
		os.Unsetenv("BENCH_BINARY")
	}
	return p
}

// getLoadOn runs callers goroutines spread over conns calling Get for
// window; it returns the latencies of the ok calls and the time taken.
func getLoadOn(b *testing.B, conns []*grpc.ClientConn, callers int, ids []string, window time.Duration) (lat []time.Duration, elapsed time.Duration) {
	for _, c := range conns { // connected before the clock starts
		if err := get(context.Background(), c, ids[0]); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var failed atomic.Int64
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(window)
	for c := range callers {
		conn := conns[c%len(conns)]
		wg.Go(func() {
			local := make([]time.Duration, 0, 4096)
			for i := c * 7919; time.Now().Before(end); i++ {
				s := time.Now()
				if err := get(context.Background(), conn, ids[i%len(ids)]); err != nil {
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
	elapsed = time.Since(t0)
	if n := failed.Load(); n > 0 || len(lat) == 0 {
		b.Fatalf("Get: %d failed (first: %v), %d ok", n, firstErr, len(lat))
	}
	return lat, elapsed
}

// createLoad: 64 callers on the provider's one connection, each owning a
// slice of the fleet and alternating Create and Delete on it. Returns
// accepted Creates/s and the p50 and p99 of an accepted Create's ack.
func createLoad(b *testing.B, p *provider, ids []string, window time.Duration) (float64, time.Duration, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	ctx := context.Background()
	t0 := time.Now()
	end := t0.Add(window)
	for c := range clients {
		mine := ids[c*len(ids)/clients : (c+1)*len(ids)/clients]
		wg.Go(func() {
			var local []time.Duration
			created := make([]bool, len(mine))
			for i := 0; time.Now().Before(end); i = (i + 1) % len(mine) {
				if created[i] {
					if p.delete(ctx, mine[i]) == nil {
						created[i] = false
					}
					continue
				}
				s := time.Now()
				if p.create(ctx, mine[i]) == nil {
					local = append(local, time.Since(s))
					created[i] = true
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if len(lat) == 0 {
		b.Fatal("no Create accepted")
	}
	slices.Sort(lat)
	return float64(len(lat)) / elapsed.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100]
}

// BenchmarkGetProfile records where bin/libvirt's CPU goes during a Get
// load of 64 callers on one connection at 100k machines (and the
// ceiling's, for comparison), with perf, which needs nothing from the
// binary: set BENCH_PERF_DIR to a directory to run it (skipped otherwise);
// it writes ours.perf.data and ceiling.perf.data there, and
// ours-create.perf.data of 64 callers churning Creates and Deletes. Summarise with
// test/bench/perf-split.py (docs/benchmarks.md, issue 24).
func BenchmarkGetProfile(b *testing.B) {
	dir := os.Getenv("BENCH_PERF_DIR")
	if dir == "" {
		b.Skip("BENCH_PERF_DIR not set")
	}
	ceiling := buildCeiling(b)
	for _, name := range []string{"ours", "ceiling", "ours-create"} {
		b.Run(name, func(b *testing.B) {
			var p *provider
			ids := []string{"certify-fake-z1-000042"}
			if name == "ceiling" {
				p = launchCeiling(b, ceiling, false)
			} else {
				p = startBinary(b, "../../bin/libvirt", 100_000, filepath.Join(b.TempDir(), "state.db"))
				ids = p.ids(b)
			}
			getLoadOn(b, []*grpc.ClientConn{p.conn}, clients, ids, time.Second) // warm
			perf := exec.Command("perf", "record", "-q", "-F", "999", "-g", "-e", "cpu-clock:u",
				"-p", fmt.Sprint(p.cmd.Process.Pid), "-o", filepath.Join(dir, name+".perf.data"), "--", "sleep", "5")
			perf.Stderr = os.Stderr
			if err := perf.Start(); err != nil {
				b.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			c0 := p.cpuTime(b)
			if name == "ours-create" {
				accepted, _, ackP99 := createLoad(b, p, ids, 4*time.Second)
				cpu := p.cpuTime(b) - c0
				if err := perf.Wait(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(accepted, "create-accepts/s")
				b.ReportMetric(ms(ackP99), "create-ack-p99-ms")
				b.ReportMetric(float64(cpu.Microseconds())/(accepted*4), "server-cpu-us/create")
				return
			}
			u0, s0 := p.cpuSplit(b)
			lat, el := getLoadOn(b, []*grpc.ClientConn{p.conn}, clients, ids, 4*time.Second)
			u1, s1 := p.cpuSplit(b)
			cpu := p.cpuTime(b) - c0
			if err := perf.Wait(); err != nil {
				b.Fatal(err)
			}
			n := float64(len(lat))
			b.ReportMetric(n/el.Seconds(), "get-ok/s")
			b.ReportMetric(float64(cpu.Microseconds())/n, "server-cpu-us/get")
			b.ReportMetric(float64((u1-u0).Microseconds())/n, "server-user-us/get")
			b.ReportMetric(float64((s1-s0).Microseconds())/n, "server-sys-us/get")
		})
	}
}
