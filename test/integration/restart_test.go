//go:build integration

package integration

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

const (
	stIdle        = pb.MachineState_MACHINE_STATE_IDLE
	stFailed      = pb.MachineState_MACHINE_STATE_FAILED
	stCreating    = pb.MachineState_MACHINE_STATE_CREATING
	stConfiguring = pb.MachineState_MACHINE_STATE_CONFIGURING
	stConfigured  = pb.MachineState_MACHINE_STATE_CONFIGURED
	stDraining    = pb.MachineState_MACHINE_STATE_DRAINING
	stSpeculative = pb.MachineState_MACHINE_STATE_SPECULATIVE
)

// TestKillMidCreate SIGKILLs bin/libvirt at three points of a Create (just
// after the accept, once the overlay volume exists, once the domain is
// defined) and restarts it on the same --state each time: the machine ends
// IDLE on its own domain or FAILED with a last_error, never stuck CREATING,
// no second domain or stray volume appears, and Delete/release leaves
// nothing of it in libvirt.
func TestKillMidCreate(t *testing.T) {
	e := loadEnv(t)
	const name = "it-kill"
	sweepAtEnd(t, e, name)
	cfg := provCfg{Name: name, State: filepath.Join(t.TempDir(), "state.db"), Slots: 2}
	p := startProvider(t, e, cfg)
	ids := p.ids(t)

	cases := []struct {
		id, when string
		ready    func(domain string) bool // kill as soon as this holds
	}{
		{ids[0], "right after the Create was accepted", func(string) bool { return true }},
		{ids[1], "once the overlay volume exists", func(d string) bool {
			// A stat of the pool directory is far quicker than virsh, so the
			// kill lands between the volume and the define more often.
			if dir := poolDir(t, e); dir != "" {
				_, err := os.Stat(filepath.Join(dir, d+".qcow2"))
				return err == nil
			}
			_, vols := ours(t, e, name)
			return slices.Contains(vols, d+".qcow2")
		}},
		{ids[0], "once the domain is defined", func(d string) bool {
			doms, _ := ours(t, e, name)
			return slices.Contains(doms, d)
		}},
	}
	for _, c := range cases {
		domain := meta.DomainName(name, c.id)
		ack := p.accept(t, "Create", &pb.CreateRequest{MachineId: c.id})
		if ack.GetMachine().GetState() != stCreating {
			t.Fatalf("ack %+v", ack.GetMachine())
		}
		t0 := time.Now()
		for !c.ready(domain) {
			if time.Since(t0) > 60*time.Second {
				t.Fatalf("%s: never saw the kill point (%s)", c.id, c.when)
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.kill(t)
		doms, vols := ours(t, e, name)
		t.Logf("killed %s after %s (%s); libvirt then held domains %v (state %q) volumes %v",
			c.id, time.Since(t0).Round(time.Millisecond), c.when, doms, virsh(t, e, "domstate", domain), vols)

		t1 := time.Now()
		p = startProvider(t, e, cfg)
		m, seen := p.awaitOneOf(t, c.id, 3*time.Minute, stIdle, stFailed)
		t.Logf("TIMING restart → %s in %s (seen %v) last_error=%q", m.GetState(), time.Since(t1).Round(time.Millisecond), seen, m.GetLastError())
		doms, vols = ours(t, e, name)
		switch m.GetState() {
		case stIdle:
			if m.GetHost().GetRef() != "local/"+domain || m.GetHost().GetProvider() != name {
				t.Fatalf("adopted with host %+v, want local/%s", m.GetHost(), domain)
			}
			if st := virsh(t, e, "domstate", domain); st != "running" {
				t.Fatalf("IDLE machine's domain is %q", st)
			}
			if md := domainMetadata(t, e, domain); !md.Owned(name, c.id) || md.ClusterID != "" {
				t.Fatalf("metadata of the adopted domain: %+v", md)
			}
		case stFailed:
			if m.GetLastError() == "" || !strings.Contains(m.GetLastError(), "create") {
				t.Fatalf("FAILED without a clear last_error: %q", m.GetLastError())
			}
		}
		// Earlier cases were settled: only this machine's domain (or none)
		// and its overlay may exist — no orphan, no second domain.
		for _, d := range doms {
			if d != domain {
				t.Fatalf("unexpected domain %s (have %v)", d, doms)
			}
		}
		for _, v := range vols {
			if v != domain+".qcow2" {
				t.Fatalf("unexpected volume %s (have %v)", v, vols)
			}
		}
		p.settle(t, c.id)
		doms, vols = ours(t, e, name)
		if slices.Contains(doms, domain) || slices.Contains(vols, domain+".qcow2") {
			t.Fatalf("after Delete/release of %s: domains %v volumes %v", c.id, doms, vols)
		}
	}
	for _, id := range ids {
		p.settle(t, id)
	}
	assertNothingLeft(t, e, name)
}

// poolDir is the directory of a dir-type pool ("" if it has none).
func poolDir(t *testing.T, e env) string {
	m := regexp.MustCompile(`<path>([^<]+)</path>`).FindStringSubmatch(virsh(t, e, "pool-dumpxml", e.Pool))
	if m == nil {
		return ""
	}
	return m[1]
}

// TestRestartWithLostState: a provider whose --state file is deleted, and
// then emptied (0 bytes), rebuilds its machines from libvirt metadata at
// startup: the IDLE one comes back IDLE on the same host, the configured
// one CONFIGURED with its cluster and shard_metadata; both can then be
// driven on (Drain, Delete) and nothing is left.
func TestRestartWithLostState(t *testing.T) {
	e := loadEnv(t)
	const name = "it-lost"
	sweepAtEnd(t, e, name)
	state := filepath.Join(t.TempDir(), "state.db")
	cfg := provCfg{Name: name, State: state, Slots: 2}
	p := startProvider(t, e, cfg)
	ids := p.ids(t)
	idle, conf := ids[0], ids[1]
	for _, id := range ids {
		p.accept(t, "Create", &pb.CreateRequest{MachineId: id})
	}
	for _, id := range ids {
		p.awaitOneOf(t, id, 3*time.Minute, stIdle)
	}
	shard := map[string]string{"shard": "s-9", "note": "ünï\x01 ", "empty": ""}
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: conf, ClusterId: "c-lost",
		BootstrapBlob: []byte("lost-state\x00blob"), ShardMetadata: shard})
	p.awaitOneOf(t, conf, 3*time.Minute, stConfigured)
	before := map[string]*pb.Machine{idle: p.get(t, idle), conf: p.get(t, conf)}

	for _, how := range []string{"deleted", "emptied"} {
		p.stop(t)
		switch how {
		case "deleted":
			must(t, os.Remove(state))
		case "emptied":
			must(t, os.Truncate(state, 0))
		}
		t0 := time.Now()
		p = startProvider(t, e, cfg)
		mi, _ := p.awaitOneOf(t, idle, time.Minute, stIdle)
		mc, _ := p.awaitOneOf(t, conf, time.Minute, stConfigured)
		t.Logf("TIMING state %s: restart → both machines rebuilt in %s", how, time.Since(t0).Round(time.Millisecond))
		for _, m := range []*pb.Machine{mi, mc} {
			b := before[m.GetId()]
			if m.GetHost().GetRef() != b.GetHost().GetRef() || m.GetHost().GetProvider() != name ||
				m.GetInstanceType() != tinyType || m.GetZone() != "local" {
				t.Fatalf("state %s: rebuilt %+v, was %+v", how, m, b)
			}
		}
		if mi.GetCluster() != "" || len(mi.GetShardMetadata()) != 0 {
			t.Fatalf("state %s: idle machine rebuilt with a binding: %+v", how, mi)
		}
		if mc.GetCluster() != "c-lost" || !maps.Equal(mc.GetShardMetadata(), shard) {
			t.Fatalf("state %s: configured machine rebuilt as cluster %q meta %q", how, mc.GetCluster(), mc.GetShardMetadata())
		}
	}

	// The rebuilt machines are fully usable.
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: conf, GracePeriodSeconds: 2})
	p.awaitOneOf(t, conf, 2*time.Minute, stIdle)
	if md := domainMetadata(t, e, meta.DomainName(name, conf)); md.ClusterID != "" {
		t.Fatalf("binding after drain: %+v", md)
	}
	for _, id := range ids {
		p.settle(t, id)
	}
	assertNothingLeft(t, e, name)
}
