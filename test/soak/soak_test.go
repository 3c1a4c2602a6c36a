//go:build soak

// Package soak is the chaos soak of issue 10: a real bin/libvirt on the
// real libvirtd with TCG test guests, churned by fenced grpc-go clients
// (Create → Configure → Drain → Delete) while the soak SIGKILLs and
// SIGTERMs the provider, kills and freezes libvirtd, kills and freezes the
// guest agent, and deletes the provider's state file. After every fault and
// at the end it checks the invariants and closes with one line:
//
//	soak: K faults, M operations, orphans=0 lost_bindings=0 false_failed=0 stuck=0
//
// It kills libvirtd: run it only under the shared lock, e.g.
// `flock /tmp/bf-real-libvirt.lock make soak-short`. Parameters: see
// loadParams; docs/reliability.md ("Chaos soak") has the commands.
package soak

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/internal/soakkit"
)

// TestMain marks every inherited descriptor close-on-exec: the soak runs
// under flock(1), and a libvirtd it restarts must not inherit (and hold
// forever) the shared lock's descriptor.
func TestMain(m *testing.M) {
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				syscall.CloseOnExec(fd)
			}
		}
	}
	os.Exit(m.Run())
}

// soak is one run: the provider, the host, the clients and the ledger.
type soak struct {
	p      params
	h      *host
	pr     *provider
	led    *ledger
	t0     time.Time
	ids    []string
	owner  map[string]*client
	locks  map[string]*sync.Mutex // held by a client for one whole operation
	domain map[string]string      // machine → the domain name the provider derives
	stop   atomic.Bool
	aimer  *aimer
	// deadline is go test's -timeout: faults stop early enough for the
	// teardown, which must always run (it leaves libvirtd thawed and clean).
	deadline time.Time
	nfault   atomic.Int64
	quiet    bool // the judgement's own tests: no progress lines
}

func (s *soak) logf(format string, args ...any) {
	if s.quiet {
		return
	}
	fmt.Printf("[%7.1fs] "+format+"\n", append([]any{time.Since(s.t0).Seconds()}, args...)...)
}

func TestSoak(t *testing.T) {
	p, err := loadParams()
	if err != nil {
		t.Fatal(err)
	}
	e, err := loadEnv()
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{p: p, led: newLedger(), aimer: newAimer(), t0: time.Now(), owner: map[string]*client{},
		locks: map[string]*sync.Mutex{}, domain: map[string]string{}}
	s.deadline, _ = t.Deadline()
	s.h = &host{env: e, prefix: "bf-" + p.Provider + "-", log: s.logf}
	s.logf("soak: %s", p)
	if _, err := os.Stat(p.Bin); err != nil {
		t.Fatalf("provider binary %s: %v (make build)", p.Bin, err)
	}
	// Whatever happens, libvirtd is left running and nothing of ours stays.
	t.Cleanup(func() {
		if err := s.h.ensureLibvirtd(); err != nil {
			t.Errorf("leaving libvirtd: %v", err)
		}
		if left := s.h.sweep(); len(left) > 0 {
			s.logf("cleanup swept %v", left)
		}
	})
	if err := s.h.ensureLibvirtd(); err != nil {
		t.Fatal(err)
	}
	if err := s.h.preflight(); err != nil {
		t.Fatal(err)
	}
	if left := s.h.sweep(); len(left) > 0 {
		s.logf("swept leftovers of an earlier run: %v", left)
	}
	s.pr, err = newProvider(p, e, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pr.Kill(); s.pr.conn.Close() })
	s.onInterrupt()
	if err := s.pr.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.setupClients(); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for _, id := range s.ids {
		wg.Go(func() { s.owner[id].drive(id) })
	}
	s.runFaults()
	s.stop.Store(true)
	s.lockAll() // every client is between operations from here on
	s.logf("faults done; settling")
	s.quiesce("end")
	s.fullCheck("end")
	s.teardown()
	s.unlockAll()
	wg.Wait()
	s.report(t)
}

// onInterrupt makes a Ctrl-C or a kill of the soak leave the host as the
// normal end does: libvirtd thawed (a freeze may be under way) and running,
// the provider stopped, nothing of ours left.
func (s *soak) onInterrupt() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		got := <-sig
		s.logf("soak: %s: thawing libvirtd, stopping the provider, sweeping", got)
		if err := s.h.ensureLibvirtd(); err != nil {
			s.logf("leaving libvirtd: %v", err)
		}
		s.pr.Kill()
		s.h.sweep()
		os.Exit(2)
	}()
}

// setupClients reads the seeded slots and deals them to the clients.
func (s *soak) setupClients() error {
	l, err := s.list()
	if err != nil {
		return err
	}
	for _, m := range l {
		if m.GetZone() == "local" && m.GetInstanceType() == instanceType {
			s.ids = append(s.ids, m.GetId())
		}
	}
	slices.Sort(s.ids)
	if len(s.ids) != s.p.Machines {
		return fmt.Errorf("provider offers %d %s slots in zone local, want %d", len(s.ids), instanceType, s.p.Machines)
	}
	clients := make([]*client, s.p.Clients)
	for i := range clients {
		clients[i] = &client{s: s, shard: fmt.Sprintf("soak-shard-%d", i), epoch: int64(i + 1),
			Draws: soakkit.NewDraws(s.p.Seed, uint64(i))}
	}
	for i, id := range s.ids {
		s.owner[id] = clients[i%len(clients)]
		s.locks[id] = &sync.Mutex{}
		s.domain[id] = domainName(s.p.Provider, id)
	}
	return nil
}

func (s *soak) lockAll() {
	for _, id := range s.ids {
		s.locks[id].Lock()
	}
}

func (s *soak) unlockAll() {
	for _, id := range s.ids {
		s.locks[id].Unlock()
	}
}

// violate records a violation with its detail (soakkit.Ledger.Explain) and the provider's last log lines.
func (s *soak) violate(class, key, what string, m *pb.Machine) {
	detail := s.led.Explain(what, m, s.t0, s.pr.Proc)
	detail += "\n    provider log tail:\n" + s.pr.Tail(8, "")
	if s.led.Violate(class, key, detail) {
		s.logf("VIOLATION [%s] %s", class, what)
	}
}

// report prints the violations and the closing line, and fails the test
// on any violation.
func (s *soak) report(t *testing.T) {
	l := s.led
	for _, o := range l.Unsettled() {
		s.violate(clOther, "unsettled|"+o.OpID, fmt.Sprintf("acknowledged %s of %s (op %s) has no outcome", o.Kind, o.Machine, o.OpID), nil)
	}
	s.aimReport()
	s.logf("operations by outcome: %s", l.Outcomes())
	for _, d := range l.Details() {
		fmt.Println(d)
	}
	if n := l.Count(clOther); n > 0 {
		t.Errorf("soak: %d other violations (listed above as [other])", n)
	}
	line := fmt.Sprintf("soak: %d faults, %d operations, orphans=%d lost_bindings=%d false_failed=%d stuck=%d",
		s.nfault.Load(), l.Acked(), l.Count(clOrphan), l.Count(clBinding), l.Count(clFalse), l.Count(clStuck))
	s.logf("wall time %s (seed %d)", time.Since(s.t0).Round(time.Second), s.p.Seed)
	fmt.Println(line)
	if len(l.Details()) > 0 {
		t.Fail()
	}
}
