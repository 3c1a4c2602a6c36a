//go:build soaklab

package soaklab

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// params is one run's settings. SOAK_MINUTES=N makes the long run (bursts of
// faults until N minutes have passed); without it the short run (CI)
// stops after MinFaults faults. SOAK_SEED replays a run's draws.
type params struct {
	Seed      uint64
	Minutes   int // 0: the short run
	MinFaults int
	// PerZone is machines per shard per zone: 2 shards × 2 zones × PerZone.
	PerZone int
	// Hold is how long a host fault lasts before it is healed.
	Hold [2]time.Duration
	// Burst is how many faults overlap in one burst.
	Burst [2]int
	// ShutdownTimeout is passed as --shutdown-timeout; a SIGTERM that makes
	// the provider exit sooner promises that no transition was cut short.
	ShutdownTimeout time.Duration
	Bin             string
	Provider        string
	// HA (SOAK_HA=1) runs two replicas with --leader-elect against a real
	// apiserver and adds the provider-failover fault (ha_test.go).
	HA bool
}

func loadParams() (params, error) {
	// The short run fits 10 minutes on 2 cores, lab up and down included:
	// short holds, two to four faults per burst.
	p := params{Seed: uint64(time.Now().UnixNano()), MinFaults: 42, PerZone: 1,
		Hold: [2]time.Duration{2 * time.Second, 10 * time.Second}, Burst: [2]int{2, 4},
		ShutdownTimeout: 15 * time.Second, Bin: "../../bin/libvirt", Provider: "soaklab"}
	for name, dst := range map[string]*int{"SOAK_MINUTES": &p.Minutes, "SOAK_MIN_FAULTS": &p.MinFaults, "SOAK_PER_ZONE": &p.PerZone} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return p, fmt.Errorf("%s=%q: want a count", name, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return p, fmt.Errorf("SOAK_SEED=%q: want an unsigned integer", v)
		}
		p.Seed = s
	}
	if p.Minutes > 0 {
		// The long run: longer outages (past the link's verdict) and
		// bigger bursts.
		p.Hold = [2]time.Duration{3 * time.Second, 45 * time.Second}
		p.Burst = [2]int{1, 4}
	}
	switch v := os.Getenv("SOAK_HA"); v {
	case "", "0":
	case "1":
		p.HA = true
	default:
		return p, fmt.Errorf("SOAK_HA=%q: want 1 or 0", v)
	}
	if v := os.Getenv("SOAK_BIN"); v != "" {
		p.Bin = v
	}
	if p.PerZone < 1 {
		return p, fmt.Errorf("SOAK_PER_ZONE=%d: want at least 1", p.PerZone)
	}
	return p, nil
}

func (p params) String() string {
	run := "short"
	if p.Minutes > 0 {
		run = fmt.Sprintf("long (%d min)", p.Minutes)
	}
	if p.HA {
		run += " ha"
	}
	return fmt.Sprintf("run=%s seed=%d min_faults=%d machines=%d hold=%v-%v burst=%d-%d",
		run, p.Seed, p.MinFaults, 4*p.PerZone, p.Hold[0], p.Hold[1], p.Burst[0], p.Burst[1])
}
