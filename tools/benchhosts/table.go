package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

var modeTitle = map[string]string{
	"none":   "no partition",
	"after":  "partitioned after connect",
	"before": "partitioned before start",
}

func printTable(w io.Writer, c config, fl *fleet, rs []*result) {
	fmt.Fprintf(w, "\nbench-hosts: %d hosts = %d healthy (libvirt test driver, test:///FILE) + %d partitioned (entries on lab host %s's qemu+tls daemon, `lab.sh fault %s partition`: packets dropped, no RST)\n",
		len(fl.healthy)+len(fl.parted), len(fl.healthy), len(fl.parted), c.partHost, c.partHost)
	fmt.Fprintf(w, "Creates on the healthy hosts per run: %d probes (one per zone, right after start), then %d paced (%d clients, %.0f/s); --reconcile-interval=%s; reconcile figures ±25 ms (admin API polled); SIGTERM waited %s at most\n\n",
		len(fl.healthy), len(fl.healthy)*(c.slots-1), c.clients, c.createRate, c.reconcileInterval, c.exitLimit)
	head := []string{"figure"}
	for _, r := range rs {
		head = append(head, modeTitle[r.Mode])
	}
	rows := [][]string{head, make([]string, len(head))}
	for i := range rows[1] {
		rows[1][i] = "---"
	}
	add := func(name string, f func(r *result) string) {
		row := []string{name}
		for _, r := range rs {
			row = append(row, f(r))
		}
		rows = append(rows, row)
	}
	add("serving after start (first List answered)", func(r *result) string {
		if r.NotServing != "" {
			return "not within " + c.serveLimit.String()
		}
		return sec(r.Serve)
	})
	add("provider's own `startup` (serving log line)", func(r *result) string { return orDash(r.StartupLog) })
	add("a Create accepted in every healthy zone, after start", func(r *result) string { return sec(r.HealthyAccepting) })
	add("first reconcile report listing every healthy zone", func(r *result) string { return sec(r.HealthyListed) })
	add("partitioned hosts reported disconnected", func(r *result) string {
		switch {
		case r.Mode == "none":
			return "—"
		case r.Mode == "after" && r.PartedDown >= 0:
			return fmt.Sprintf("all %d, %s after the partition", r.PartedDownN, sec(r.PartedDown))
		case r.Mode == "after":
			return fmt.Sprintf("%d of %d after %s", r.PartedDownN, len(fl.parted), c.downLimit)
		}
		return fmt.Sprintf("%d of %d when serving", r.PartedDownN, len(fl.parted))
	})
	add("reconcile: first pass", func(r *result) string {
		if len(r.Passes) == 0 {
			return "none seen"
		}
		return fmt.Sprintf("%s (%d zones unlisted)", sec(r.Passes[0].Took()), r.Passes[0].ZoneErrs)
	})
	add("reconcile: later passes, median / max", func(r *result) string {
		if len(r.Passes) < 2 {
			return "none ended"
		}
		var ds []time.Duration
		for _, p := range r.Passes[1:] {
			ds = append(ds, p.Took())
		}
		last := r.Passes[len(r.Passes)-1]
		return fmt.Sprintf("%s / %s (n=%d; %d zones unlisted)", sec(pct(ds, 50)), sec(slices.Max(ds)), len(ds), last.ZoneErrs)
	})
	add("paced Create accepted: p50 / p99 / max", func(r *result) string {
		if len(r.Accept) == 0 {
			return "none"
		}
		return fmt.Sprintf("%s / %s / %s", ms(pct(r.Accept, 50)), ms(pct(r.Accept, 99)), ms(slices.Max(r.Accept)))
	})
	add("… of them sent before the partition was reported", func(r *result) string {
		if r.Mode != "after" || len(r.AcceptUnnoticed) == 0 {
			return "—"
		}
		u := r.AcceptUnnoticed
		return fmt.Sprintf("n=%d: %s / %s / %s", len(u), ms(pct(u, 50)), ms(pct(u, 99)), ms(slices.Max(u)))
	})
	add("paced Creates accepted / refused", func(r *result) string {
		s := fmt.Sprintf("%d / %d", r.Created, r.CreateErrs)
		if r.FirstErr != "" {
			s += " (" + trunc(r.FirstErr, 60) + ")"
		}
		return s
	})
	add("paced Creates IDLE", func(r *result) string { return fmt.Sprintf("%d of %d", r.Idle, r.Created+r.CreateErrs) })
	add("threads: before / after / max", func(r *result) string {
		return fmt.Sprintf("%d / %d / %d", r.Before.Threads, r.After.Threads, r.MaxThreads)
	})
	add("VmRSS before / after; VmHWM", func(r *result) string {
		return fmt.Sprintf("%s / %s; %s", mib(r.Before.RSSKiB), mib(r.After.RSSKiB), mib(r.After.HWMKiB))
	})
	add(fmt.Sprintf("threads; VmRSS %s after the partition", c.settle), func(r *result) string {
		if r.Mode == "none" || r.Settled.Threads == 0 {
			return "—"
		}
		return fmt.Sprintf("%d; %s", r.Settled.Threads, mib(r.Settled.RSSKiB))
	})
	add("SIGTERM → exit", func(r *result) string {
		if !r.ExitOK {
			return "> " + sec(r.Exit) + " (killed)"
		}
		return sec(r.Exit)
	})
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w)
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100 // nearest rank
	return s[max(i-1, 0)]
}

func sec(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", d.Seconds()*1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1000) }

func mib(kib int) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func trunc(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
