//go:build ha

package ha

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestBenchFailover (make bench-ha): HA_BENCH_KILLS SIGKILLs of the leader
// (20 by default) with the chart's timings and with a short lease; prints
// the failover time's p50/p90/max and what a standby costs, and writes
// them to out/bench-ha.txt.
func TestBenchFailover(t *testing.T) {
	if os.Getenv("HA_BENCH") == "" {
		t.Skip("make bench-ha sets HA_BENCH=1")
	}
	n := 20
	if s := os.Getenv("HA_BENCH_KILLS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	k := startKube(t)
	var out string
	for i, tm := range []timing{short, chartTm} {
		times, sRSS, lRSS := failovers(t, k, tm, fmt.Sprintf("bench-%d", i), n)
		slices.Sort(times)
		line := fmt.Sprintf("%-26s kills %2d  failover p50 %6s  p90 %6s  max %6s  (bound lease+2×retry+1s = %s)  RSS standby median %d KiB, leader median %d KiB\n",
			tm.name, len(times), pct(times, 50), pct(times, 90), times[len(times)-1].Round(10*time.Millisecond), tm.bound(),
			median(sRSS), median(lRSS))
		t.Log(line)
		out += line
	}
	_ = os.MkdirAll(filepath.Join(root, "out"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "out/bench-ha.txt"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Print(out)
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(10 * time.Millisecond)
}

func median(v []int) int {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
