package main

import (
	"runtime/debug"
)

// defaultGCPercent is the collector's pacing when GOGC is not set: a
// collection once the heap has grown by twice the live data, not once.
//
// Why (issue 24, docs/benchmarks.md): the provider's heap is its fleet's
// records, a few hundred MiB at 100k machines, and each collection marks
// all of it with a quarter of the CPU. Under a shard's load on one
// connection that marking was most of the gap between our Get's p99 and a
// bare handler's (1.22x against 1.02x with 200, same run), and 11% of the
// CPU of an accepted Create. The price is memory: peak RSS at 100k went from
// 393 to 471 MiB in that run. GOMEMLIMIT (which the chart sets from the
// memory limit) still bounds it: near the limit the collector runs more
// often whatever this says. GOGC=100 restores the runtime's default.
const defaultGCPercent = 200

// setGCPacing applies defaultGCPercent unless the operator set GOGC; it
// returns the percent in force (-1 for GOGC=off).
func setGCPacing(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(100) // read the runtime's value from GOGC...
		debug.SetGCPercent(p)        // ...and put it back
		return p
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
