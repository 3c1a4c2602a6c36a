package store

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// seed fills a new store with n machines (and a mark each) in large batches.
func seed(b *testing.B, n int) (*Bolt, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "state.db")
	s := openBolt(b, path, BoltOptions{})
	const chunk = 5000
	for lo := 0; lo < n; lo += chunk {
		batch := record.Batch{Marks: map[record.MarkKey]record.Mark{}}
		for i := lo; i < min(lo+chunk, n); i++ {
			m := sampleMachine(fmt.Sprintf("seed-%07d", i))
			batch.Machines = append(batch.Machines, m)
			batch.Marks[record.MarkKey{ShardID: "s", MachineID: m.ID}] = record.Mark{Epoch: 1, Sequence: 1}
		}
		must(b, s.Commit(b.Context(), batch))
	}
	return s, path
}

// BenchmarkCommit: 64 goroutines, each Commit one machine plus one mark, on
// fleets of growing size. commits/s should not fall as the fleet grows.
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("fleet=%d", n), func(b *testing.B) {
			s, _ := seed(b, n)
			defer s.Close()
			base := s.Stats()
			var next atomic.Int64
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((64 + procs - 1) / procs)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) % int64(n) // overwrite existing records
					m := sampleMachine(fmt.Sprintf("seed-%07d", i))
					m.Revision = uint64(i)
					err := s.Commit(b.Context(), record.Batch{
						Machines: []record.Machine{m},
						Marks: map[record.MarkKey]record.Mark{
							{ShardID: "s", MachineID: m.ID}: {Epoch: 2, Sequence: i},
						},
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			st := s.Stats()
			commits, txs := st.Commits-base.Commits, st.Transactions-base.Transactions
			b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(float64(commits)/float64(max(txs, 1)), "commits/tx")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	s, _ := seed(b, 100_000)
	defer s.Close()
	b.ResetTimer()
	for b.Loop() {
		snap, err := s.Load(b.Context())
		if err != nil || len(snap.Machines) != 100_000 {
			b.Fatal(len(snap.Machines), err)
		}
	}
}
