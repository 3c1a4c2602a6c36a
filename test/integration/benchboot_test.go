//go:build integration && golden && benchboot

package integration

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// make bench-boot (mk/boot.mk): how long warm capacity takes to be warm,
// on the real libvirtd, cold boots, one machine at a time (a 2-core TCG
// host booting several guests at once measures the host, not the boot).
// For each image and firmware, and for the provider with --wait-booted
// (IDLE = booted) and without it (IDLE = the domain runs, as before):
//   Create → IDLE, then Configure on that IDLE machine → CONFIGURED, and
//   their sum Create → CONFIGURED (the Configure sent the moment IDLE is seen).
// BIGFLEET_BENCH_BOOT_N machines each (default 5); p50/p90 of each.
// The table goes to out/bench-boot.md; BIGFLEET_GOLDEN_IMAGE empty runs
// the test initramfs alone, BIGFLEET_BENCH_BOOT_INITRAMFS=0 the image
// alone; BIGFLEET_BENCH_BOOT_UEFI=1 adds UEFI (OVMF) rows for both.

type bootBench struct {
	name     string
	image    string   // volume in the pool
	boot     []string // direct kernel boot for the initramfs guest
	firmware string   // the instance type's firmware ("" BIOS)
	memory   int
}

// bootSample is one machine's three figures.
type bootSample struct{ idle, configure, total time.Duration }

func TestBenchBoot(t *testing.T) {
	e := loadEnv(t)
	n := 5
	if s := os.Getenv("BIGFLEET_BENCH_BOOT_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	var benches []bootBench
	uefi := os.Getenv("BIGFLEET_BENCH_BOOT_UEFI") == "1"
	if os.Getenv("BIGFLEET_BENCH_BOOT_INITRAMFS") != "0" {
		direct := []string{"--kernel=" + e.Kernel, "--initrd=" + e.Initrd, "--cmdline=" + e.Cmdline}
		benches = append(benches, bootBench{name: "test initramfs BIOS", image: e.Image, memory: 256, boot: direct})
		if uefi {
			// OVMF loads the same kernel and initramfs (fw_cfg): what UEFI
			// adds to a boot is the firmware's own start.
			benches = append(benches, bootBench{name: "test initramfs UEFI", image: e.Image, memory: 256, boot: direct, firmware: "uefi"})
		}
	}
	if img := os.Getenv("BIGFLEET_GOLDEN_IMAGE"); img != "" {
		vol := goldenPoolVolume(t, e, img)
		base := strings.TrimSuffix(filepath.Base(img), ".qcow2")
		benches = append(benches, bootBench{name: base + " BIOS", image: vol, memory: 1024})
		if uefi {
			benches = append(benches, bootBench{name: base + " UEFI", image: vol, memory: 1024, firmware: "uefi"})
		}
	}
	rows := []string{"| image | IDLE means | Create → IDLE p50 / p90 | Configure on IDLE → CONFIGURED p50 / p90 | Create → CONFIGURED p50 / p90 |",
		"|---|---|---|---|---|"}
	for _, b := range benches {
		for _, wait := range []bool{false, true} {
			mode := map[bool]string{false: "domain runs (--wait-booted=false)", true: "booted (--wait-booted)"}[wait]
			var samples []bootSample
			t.Run(fmt.Sprintf("%s/wait-booted=%v", b.name, wait), func(t *testing.T) { samples = benchBoot(t, e, b, wait, n) })
			if len(samples) == 0 {
				continue
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s |", b.name, mode,
				pct(samples, func(s bootSample) time.Duration { return s.idle }),
				pct(samples, func(s bootSample) time.Duration { return s.configure }),
				pct(samples, func(s bootSample) time.Duration { return s.total })))
		}
	}
	table := strings.Join(rows, "\n")
	t.Logf("bench-boot (accel %s, n=%d):\n%s", e.Accel, n, table)
	_ = os.MkdirAll("../../out", 0o755)
	_ = os.WriteFile("../../out/bench-boot.md", []byte(fmt.Sprintf("accel %s, n=%d per row\n\n%s\n", e.Accel, n, table)), 0o644)
}

// benchBoot runs n machines of b, one after the other, on a provider of its own.
func benchBoot(t *testing.T, e env, b bootBench, wait bool, n int) []bootSample {
	dir := t.TempDir()
	types := filepath.Join(dir, "types.json")
	offers := filepath.Join(dir, "offerings.json")
	fw := ""
	if b.firmware != "" {
		fw = fmt.Sprintf(`, "firmware": %q`, b.firmware)
	}
	must(t, os.WriteFile(types, []byte(fmt.Sprintf(`[{"name": "bench", "vcpu": 1, "memory_mib": %d%s}]`, b.memory, fw)), 0o600))
	must(t, os.WriteFile(offers, []byte(fmt.Sprintf(`[{"instance_type": "bench", "zone": "local", "capacity_type": "on_demand", "count": %d}]`, n)), 0o600))
	name := "it-bench-boot"
	sweepAtEnd(t, e, name)
	args := append([]string{"--image=" + b.image, "--instance-types=" + types, "--offerings=" + offers,
		"--wait-booted=" + strconv.FormatBool(wait), "--agent-wait=8m", "--create-timeout=10m", "--seed-count=" + strconv.Itoa(n)}, b.boot...)
	p := startGoldenBinary(t, e, providerBinary(t), name, args)
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(n)*12*time.Minute)
	defer cancel()
	var out []bootSample
	for i := range n {
		id := p.slot(t, "local").GetId()
		t0 := time.Now()
		m := p.transition(t, ctx, "Create", &pb.CreateRequest{MachineId: id}, pb.MachineState_MACHINE_STATE_IDLE)
		idle := time.Since(t0)
		domain := strings.TrimPrefix(m.GetHost().GetRef(), "local/")
		t1 := time.Now()
		p.transition(t, ctx, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-bench",
			BootstrapBlob: []byte("bench")}, pb.MachineState_MACHINE_STATE_CONFIGURED)
		s := bootSample{idle: idle, configure: time.Since(t1), total: time.Since(t0)}
		t.Logf("BENCH %s wait-booted=%v #%d: Create → IDLE %s, Configure → CONFIGURED %s, Create → CONFIGURED %s",
			b.name, wait, i+1, s.idle.Round(100*time.Millisecond), s.configure.Round(100*time.Millisecond), s.total.Round(100*time.Millisecond))
		out = append(out, s)
		cleanupDomain(t, e, domain) // the next boot is cold and alone
	}
	return out
}

// pct is "p50 / p90" of one figure (nearest rank).
func pct(s []bootSample, f func(bootSample) time.Duration) string {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = f(x)
	}
	slices.SortFunc(d, func(a, b time.Duration) int { return cmp.Compare(a, b) })
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(d))+0.999999) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return fmt.Sprintf("%.1f s / %.1f s", rank(0.5).Seconds(), rank(0.9).Seconds())
}
