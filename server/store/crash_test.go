package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

const crashEnv = "STORE_CRASH_CHILD_PATH"

func crashMark(id string) (record.MarkKey, record.Mark) {
	return record.MarkKey{ShardID: "crash", MachineID: id},
		record.Mark{Epoch: int64(len(id)), Sequence: 1<<62 + int64(len(id))}
}

// TestCrashChild is the child half of TestCrash: it only runs when re-executed
// with crashEnv set. It commits from several goroutines and prints "ack <id>"
// for each Commit that returned nil, until it is killed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("child of TestCrash only")
	}
	round := os.Getenv(crashEnv + "_ROUND")
	s, err := OpenBolt(path, BoltOptions{LockTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var out sync.Mutex
	deadline := time.Now().Add(time.Minute) // never outlive a broken parent
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("r%s-g%d-%d", round, g, i)
				k, m := crashMark(id)
				err := s.Commit(t.Context(), record.Batch{
					Machines: []record.Machine{sampleMachine(id)},
					Marks:    map[record.MarkKey]record.Mark{k: m},
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				out.Lock()
				// One write per line, unbuffered: once the parent reads it,
				// the ack is real.
				os.Stdout.WriteString("ack " + id + "\n")
				out.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestCrash SIGKILLs a committing child at random moments and checks that
// every acknowledged commit survived, intact, and nothing is corrupt.
func TestCrash(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "state.db")
	acked := map[string]bool{}
	for round := range 3 {
		for id := range crashRound(t, path, round, 100+rand.IntN(300)) {
			acked[id] = true
		}
		verifyCrashFile(t, path, acked)
	}
}

// crashRound runs one child until it has acknowledged at least n commits,
// kills it, and returns every id it acknowledged.
func crashRound(t *testing.T, path string, round, n int) map[string]bool {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path, fmt.Sprintf("%s_ROUND=%d", crashEnv, round))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	acked := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "ack ")
		if !ok {
			continue // test framework chatter
		}
		acked[id] = true
		if !killed && len(acked) >= n {
			must(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true // keep reading: acks still in the pipe count too
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child ended before %d acks (got %d): %v", n, len(acked), err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL: %v", err)
	}
	t.Logf("round %d: killed after %d acks", round, len(acked))
	return acked
}

func verifyCrashFile(t *testing.T, path string, acked map[string]bool) {
	t.Helper()
	s := openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	got := byID(snap.Machines)
	if len(got) != len(snap.Machines) {
		t.Fatal("duplicate machine records")
	}
	for id := range acked {
		if _, ok := got[id]; !ok {
			t.Fatalf("acknowledged machine %q lost", id)
		}
	}
	// Everything present, acknowledged or not, must be whole.
	for id, m := range got {
		requireSameMachine(t, m, sampleMachine(id))
		k, want := crashMark(id)
		if snap.Marks[k] != want {
			t.Fatalf("mark for %q = %v, want %v", id, snap.Marks[k], want)
		}
	}
	if len(snap.Marks) != len(got) {
		t.Fatalf("%d marks for %d machines", len(snap.Marks), len(got))
	}
}
