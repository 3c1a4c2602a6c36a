// Command benchhosts is `make bench-hosts` (issue 21): the real provider
// binary against 200 libvirt hosts, 25% of them partitioned, measuring the
// reconcile pass, Create acceptance on the healthy hosts, the provider's
// threads and memory, and SIGTERM to exit, in three runs: no partition,
// partitioned after connect, and partitioned before the provider starts
// (a rack without power). Results: a table on stdout and results.json in
// -out; docs/benchmarks.md has the recorded figures.
//
// Hosts: the healthy ones are libvirt test-driver nodes (test:///FILE)
// behind the provider's real connection code; the partitioned ones are
// host entries (distinct names and zones, no machines) that all point at
// one real remote daemon of the lab (docs/lab.md), silenced with
// `scripts/lab.sh fault HOST partition` (packets dropped, no RST).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

type config struct {
	binary, out, labScript, labHosts, labArgs, partHost         string
	settle                                                      time.Duration
	healthy, parted, slots, clients                             int
	createRate                                                  float64
	reconcileInterval, window, exitLimit, downLimit, serveLimit time.Duration
	runs                                                        string
}

func main() {
	var c config
	flag.StringVar(&c.binary, "binary", "bin/libvirt", "provider binary")
	flag.StringVar(&c.out, "out", "out/bench-hosts", "directory for the hosts files, the provider logs and results.json")
	flag.StringVar(&c.labScript, "lab", "scripts/lab.sh", "the lab script (fault/heal)")
	flag.StringVar(&c.labHosts, "lab-hosts", os.Getenv("BIGFLEET_LAB_HOSTS"), "the lab's hosts file ($BIGFLEET_LAB_HOSTS)")
	flag.StringVar(&c.labArgs, "lab-args", os.Getenv("BIGFLEET_LAB_ARGS"), "the lab's provider flags ($BIGFLEET_LAB_ARGS)")
	flag.StringVar(&c.partHost, "partition-host", "lab3", "the lab host the partitioned entries point at")
	flag.IntVar(&c.healthy, "healthy", 150, "healthy (test-driver) hosts")
	flag.IntVar(&c.parted, "partitioned", 50, "partitioned host entries")
	flag.IntVar(&c.slots, "slots", 5, "slots per healthy zone, each Created once (the first as the zone's acceptance probe right after start, the others paced)")
	flag.IntVar(&c.clients, "clients", 4, "concurrent Create clients")
	flag.Float64Var(&c.createRate, "create-rate", 25, "Creates started per second (paced, so they overlap reconcile passes)")
	flag.DurationVar(&c.reconcileInterval, "reconcile-interval", 10*time.Second, "the provider's --reconcile-interval")
	flag.DurationVar(&c.window, "window", 30*time.Second, "minimum time each run observes reconcile passes after its Creates start")
	flag.DurationVar(&c.exitLimit, "exit-limit", 90*time.Second, "SIGTERM to exit: past this the provider is killed and the figure is a lower bound")
	flag.DurationVar(&c.downLimit, "down-limit", 90*time.Second, "how long to wait for the provider to report the partitioned hosts disconnected")
	flag.DurationVar(&c.serveLimit, "serve-limit", 5*time.Minute, "how long to wait for the provider to serve")
	flag.DurationVar(&c.settle, "settle", 2*time.Minute, "partitioned runs: threads and memory are read again this long after the partition (or the start), the partition still on")
	flag.StringVar(&c.runs, "runs", "none,after,before", "runs, in order: none, after (partitioned after connect), before (partitioned before start)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-hosts:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.labHosts == "" || c.labArgs == "" {
		return fmt.Errorf("the lab's env is not loaded: scripts/lab.sh up 4, then . /run/bigfleet-lab/env (BIGFLEET_LAB_HOSTS, BIGFLEET_LAB_ARGS)")
	}
	bin, err := filepath.Abs(c.binary)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	out, _ := filepath.Abs(c.out)
	partURI, err := labURI(c.labHosts, c.partHost)
	if err != nil {
		return err
	}
	flags := strings.Fields(c.labArgs)
	get := func(name string) string {
		v := ""
		for _, f := range flags {
			if s, ok := strings.CutPrefix(f, "--"+name+"="); ok {
				v = s
			}
		}
		return v
	}
	fl, err := writeFleet(out, c.healthy, c.parted, c.slots, partURI, get("storage-pool"), get("image"), get("network"))
	if err != nil {
		return err
	}
	lab := labCtl{script: c.labScript, host: c.partHost}
	// Whatever happens, the lab host is healed at the end.
	defer lab.heal()

	var results []*result
	for _, mode := range strings.Split(c.runs, ",") {
		r, err := c.one(bin, out, mode, fl, flags, lab)
		if err != nil {
			return fmt.Errorf("run %s: %w", mode, err)
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "bench-hosts: run %s done\n", mode)
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	os.WriteFile(filepath.Join(out, "results.json"), b, 0o644)
	printTable(os.Stdout, c, fl, results)
	return nil
}

// result is one run's figures.
type result struct {
	NotServing    string // set when the provider did not serve within -serve-limit
	Mode          string
	Serve         time.Duration // process start → first List answered
	StartupLog    string        // the provider's own "startup" figure
	HealthyListed time.Duration // process start → a reconcile report with every healthy zone listed
	// process start → a Create accepted in every healthy zone
	HealthyAccepting time.Duration
	// partition (after) or start (before) + -settle: the threads and memory then
	Settled         procStat
	PartedDown      time.Duration // partition → every partitioned host reported disconnected (-1: not within the limit)
	PartedDownN     int
	Passes          []pass
	Accept          []time.Duration
	AcceptUnnoticed []time.Duration // after: those sent before the partition was reported
	CreateErrs      int
	FirstErr        string
	Idle, Created   int
	Before, After   procStat
	MaxThreads      int
	Exit            time.Duration
	ExitOK          bool
}

// pass is one reconcile pass seen through the admin API: its start (the
// report's time), when the report was first seen (the pass ended at most
// one poll earlier), and how many zones it could not list.
type pass struct {
	At, Seen time.Time
	ZoneErrs int
	Zones    int
}

func (p pass) Took() time.Duration { return p.Seen.Sub(p.At) }

func (c config) one(bin, out, mode string, fl *fleet, labFlags []string, lab labCtl) (*result, error) {
	r := &result{Mode: mode, PartedDown: -1}
	fmt.Fprintf(os.Stderr, "bench-hosts: run %s: %d healthy test-driver hosts, %d entries on %s\n", mode, len(fl.healthy), len(fl.parted), lab.host)
	if mode == "before" {
		if err := lab.fault(); err != nil {
			return nil, err
		}
		defer lab.heal()
	}
	state := filepath.Join(out, "state-"+mode+".db")
	os.Remove(state)
	args := append(slices.Clone(labFlags),
		// After the lab's flags (which say qemu): auto takes the test
		// driver's "test" type and the lab host's qemu.
		"--domain-type=auto",
		"--hosts="+fl.hostsFile, "--offerings="+fl.offerings, "--state="+state,
		"--reconcile-interval="+c.reconcileInterval.String(), "--log-format=json")
	p, err := launch(bin, args, filepath.Join(out, "provider-"+mode+".log"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if !r.ExitOK && r.Exit == 0 {
			p.kill()
		}
	}()
	sampler := startSampler(p)
	var downWait sync.WaitGroup
	partAt := p.started
	var partedSeen time.Time
	if r.Serve, err = p.waitServing(c.serveLimit); err != nil {
		// Recorded, not fatal: a provider that does not serve with the
		// partition is the figure.
		fmt.Fprintf(os.Stderr, "bench-hosts: run %s: %v\n", mode, err)
		r.NotServing = err.Error()
		r.After, _ = p.stat()
		r.Before = r.After
		r.MaxThreads = sampler.stop()
		r.Exit, r.ExitOK = p.terminate(c.exitLimit)
		return r, nil
	}
	r.StartupLog = startupLine(p.log.Name())
	watcher := startWatcher(p)
	// One Create per healthy zone, each retried every 10 ms until
	// accepted: a zone accepts mutations once it is listed.
	probe, err := healthyIDs(p, fl.healthy, true)
	if err != nil {
		return nil, err
	}
	if r.HealthyAccepting, err = acceptAll(p, probe, 5*time.Minute); err != nil {
		return nil, err
	}
	if r.HealthyListed, err = watcher.waitListed(p.started, fl.healthy, 5*time.Minute); err != nil {
		return nil, err
	}
	if r.Before, err = p.stat(); err != nil {
		return nil, err
	}
	if mode == "after" {
		// Every entry on the lab host connected first.
		if err := waitHosts(p, fl.parted, true, 2*time.Minute); err != nil {
			return nil, err
		}
		if r.Before, err = p.stat(); err != nil {
			return nil, err
		}
		t := time.Now()
		partAt = t
		if err := lab.fault(); err != nil {
			return nil, err
		}
		defer lab.heal()
		// The Creates start at once: the partition is not yet noticed
		// while the first of them are accepted.
		downWait.Go(func() {
			if err := waitHosts(p, fl.parted, false, c.downLimit); err == nil {
				r.PartedDown = time.Since(t)
				partedSeen = time.Now()
			}
		})
	}
	goAt := time.Now()
	ids, err := healthyIDs(p, fl.healthy, false)
	if err != nil {
		return nil, err
	}
	var at []time.Time
	r.Accept, at, r.CreateErrs, r.FirstErr = c.creates(p, ids)
	r.Created = len(r.Accept)
	r.Idle = waitIdle(p, ids, time.Minute)
	downWait.Wait()
	if mode != "none" {
		r.PartedDownN = countDown(p, fl.parted)
	}
	if mode == "after" {
		for i, a := range at {
			if partedSeen.IsZero() || a.Before(partedSeen) {
				r.AcceptUnnoticed = append(r.AcceptUnnoticed, r.Accept[i])
			}
		}
	}
	// At least the window, and at least two passes that began after the
	// Creates did (when any pass ends at all).
	for deadline := goAt.Add(c.window); ; time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, ps := range watcher.passes() {
			if ps.At.After(goAt) {
				n++
			}
		}
		if time.Now().After(deadline) && (n >= 2 || time.Now().After(deadline.Add(2*c.reconcileInterval+30*time.Second))) {
			break
		}
	}
	if r.After, err = p.stat(); err != nil {
		return nil, err
	}
	if mode != "none" {
		// The partition stays: do the threads come back down?
		time.Sleep(time.Until(partAt.Add(c.settle)))
		if r.Settled, err = p.stat(); err != nil {
			return nil, err
		}
	}
	watcher.stop()
	r.Passes = watcher.passes()
	r.MaxThreads = sampler.stop()
	r.Exit, r.ExitOK = p.terminate(c.exitLimit)
	return r, nil
}

// healthyIDs lists the speculative slots of the healthy zones (with
// onePerZone, the first of each).
func healthyIDs(p *provider, healthy []string, onePerZone bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms, err := p.list(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	taken := map[string]bool{}
	for _, m := range ms {
		if slices.Contains(healthy, m.GetZone()) && m.GetState() == pb.MachineState_MACHINE_STATE_SPECULATIVE && !taken[m.GetZone()] {
			ids = append(ids, m.GetId())
			taken[m.GetZone()] = onePerZone
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no speculative slot in the healthy zones")
	}
	return ids, nil
}

// acceptAll Creates each id, retrying each refused one every 10 ms, and
// returns the time from the provider's start until all were accepted.
func acceptAll(p *provider, ids []string, limit time.Duration) (time.Duration, error) {
	pending := ids
	deadline := time.Now().Add(limit)
	var lastErr error
	for len(pending) > 0 {
		var next []string
		for _, id := range pending {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := p.create(ctx, id)
			cancel()
			if err != nil {
				next = append(next, id)
				lastErr = err
			}
		}
		pending = next
		if len(pending) > 0 {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%d zones still refuse Create after %s: %v", len(pending), limit, lastErr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(p.started), nil
}

// creates Creates every id once, started at createRate per second by
// c.clients clients, and returns each accepted Create's round trip.
func (c config) creates(p *provider, ids []string) (lat []time.Duration, sent []time.Time, errs int, first string) {
	work := make(chan string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range c.clients {
		wg.Go(func() {
			for id := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t := time.Now()
				err := p.create(ctx, id)
				d := time.Since(t)
				cancel()
				mu.Lock()
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
				} else {
					lat = append(lat, d)
					sent = append(sent, t)
				}
				mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.createRate))
	for _, id := range ids {
		<-tick.C
		work <- id
	}
	tick.Stop()
	close(work)
	wg.Wait()
	return lat, sent, errs, first
}

// waitIdle waits until every id is IDLE (or limit) and returns how many are.
func waitIdle(p *provider, ids []string, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ms, err := p.list(ctx)
		cancel()
		n := 0
		if err == nil {
			for _, m := range ms {
				if m.GetState() == pb.MachineState_MACHINE_STATE_IDLE && slices.Contains(ids, m.GetId()) {
					n++
				}
			}
		}
		if n == len(ids) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitHosts waits until every named host is reported connected (or not).
func waitHosts(p *provider, names []string, connected bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hs, err := p.hosts(ctx)
		cancel()
		if err == nil {
			n := 0
			for _, h := range hs {
				if slices.Contains(names, h.GetName()) && h.GetConnected() == connected {
					n++
				}
			}
			if n == len(names) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hosts not all connected=%v within %s", connected, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countDown(p *provider, names []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, _ := p.hosts(ctx)
	n := 0
	for _, h := range hs {
		if slices.Contains(names, h.GetName()) && !h.GetConnected() {
			n++
		}
	}
	return n
}

// watcher polls the admin API's last reconcile report every 25 ms and
// keeps each new one.
type watcher struct {
	mu   sync.Mutex
	seen []pass
	done chan struct{}
	wg   sync.WaitGroup
}

func startWatcher(p *provider) *watcher {
	w := &watcher{done: make(chan struct{})}
	w.wg.Go(func() {
		var last time.Time
		for {
			select {
			case <-w.done:
				return
			case <-time.After(25 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := p.summary(ctx)
			cancel()
			if err != nil || s.GetLastReconcile().GetTime() == nil {
				continue
			}
			at := s.GetLastReconcile().GetTime().AsTime()
			if at.Equal(last) {
				continue
			}
			last = at
			ps := pass{At: at, Seen: time.Now(), Zones: len(s.GetLastReconcile().GetZones())}
			for _, z := range s.GetLastReconcile().GetZones() {
				if z.GetError() != "" {
					ps.ZoneErrs++
				}
			}
			w.mu.Lock()
			w.seen = append(w.seen, ps)
			w.mu.Unlock()
		}
	})
	return w
}

func (w *watcher) passes() []pass {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func (w *watcher) stop() { close(w.done); w.wg.Wait() }

// waitListed waits for a report listing every healthy zone and returns the
// time from start until it was seen.
func (w *watcher) waitListed(start time.Time, healthy []string, limit time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, ps := range w.passes() {
			if ps.Zones-ps.ZoneErrs >= len(healthy) {
				return ps.Seen.Sub(start), nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no reconcile report listed every healthy zone within %s", limit)
}

// sampler reads the provider's thread count every 200 ms, keeping the max.
type sampler struct {
	max  int
	done chan struct{}
	wg   sync.WaitGroup
}

func startSampler(p *provider) *sampler {
	s := &sampler{done: make(chan struct{})}
	s.wg.Go(func() {
		for {
			if st, err := p.stat(); err == nil && st.Threads > s.max {
				s.max = st.Threads
			}
			select {
			case <-s.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return s
}

func (s *sampler) stop() int { close(s.done); s.wg.Wait(); return s.max }

// labCtl injects and removes the partition through scripts/lab.sh.
type labCtl struct{ script, host string }

func (l labCtl) fault() error {
	out, err := exec.Command(l.script, "fault", l.host, "partition").CombinedOutput()
	if err != nil {
		return fmt.Errorf("lab.sh fault %s partition: %v: %s", l.host, err, out)
	}
	return nil
}

func (l labCtl) heal() {
	if out, err := exec.Command(l.script, "heal", l.host).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-hosts: lab.sh heal %s: %v: %s\n", l.host, err, out)
	}
}
