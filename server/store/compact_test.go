package store

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// seedFile writes n machines of a few offerings (and a mark each) as the
// given format: JSON records (schema 1, as the previous version wrote
// them) or through the store.
func seedFile(t *testing.T, path string, n int, legacy bool) ([]record.Machine, map[record.MarkKey]record.Mark) {
	t.Helper()
	ms := make([]record.Machine, n)
	marks := map[record.MarkKey]record.Mark{}
	for i := range ms {
		m := sampleMachine(fmt.Sprintf("m-%06d", i))
		m.Labels = map[string]string{"pool": strconv.Itoa(i % 3)}
		ms[i] = m
		marks[record.MarkKey{ShardID: "s", MachineID: m.ID}] = record.Mark{Epoch: 1, Sequence: int64(i)}
	}
	s := openBolt(t, path, BoltOptions{})
	must(t, s.Commit(t.Context(), record.Batch{Machines: ms, Marks: marks}))
	must(t, s.Close())
	if legacy {
		db, err := bolt.Open(path, 0o600, nil)
		must(t, err)
		must(t, db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketMachines)
			for i := range ms {
				if err := b.Put([]byte(ms[i].ID), encodeMachineJSON(t, &ms[i])); err != nil {
					return err
				}
			}
			must(t, tx.DeleteBucket(bucketOfferings))
			return tx.Bucket(bucketMeta).Put(keySchema, be64(1))
		}))
		must(t, db.Close())
	}
	return ms, marks
}

func requireFile(t *testing.T, path string, ms []record.Machine, marks map[record.MarkKey]record.Mark, id uint64) {
	t.Helper()
	s := openBolt(t, path, BoltOptions{KeepFormat: true})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, ms, marks)
	if snap.StoreID != id {
		t.Fatalf("store id %x, want %x", snap.StoreID, id)
	}
}

func storeID(t *testing.T, path string) uint64 {
	t.Helper()
	s := openBolt(t, path, BoltOptions{KeepFormat: true})
	defer s.Close()
	return s.StoreID()
}

// Compaction of a schema 1 file (JSON records) keeps every record, mark and
// the store id, leaves only binary records, and shrinks the file.
func TestCompactLegacyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	ms, marks := seedFile(t, path, 3000, true)
	raw, schema := rawRecords(t, path)
	if schema != 1 || raw[ms[0].ID][0] != '{' {
		t.Fatal("seedFile did not write a schema 1 file")
	}
	// The id, read without upgrading the file.
	var id uint64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	must(t, err)
	must(t, db.View(func(tx *bolt.Tx) error { id = beUint(tx.Bucket(bucketMeta).Get(keyStoreID)); return nil }))
	must(t, db.Close())

	res, err := Compact(path, CompactOptions{})
	must(t, err)
	if res.Machines != 3000 || res.Marks != 3000 || res.Offerings != 3 || res.After >= res.Before {
		t.Fatalf("compact: %+v", res)
	}
	raw, schema = rawRecords(t, path)
	for k, v := range raw {
		if v[0] != formatBinaryV1 {
			t.Fatalf("record %s still format 0x%02x", k, v[0])
		}
	}
	if schema != schemaVersion {
		t.Fatalf("schema %d after compaction", schema)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	requireFile(t, path, ms, marks, id)
}

func beUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// Offerings no record refers to any more are dropped by compaction.
func TestCompactDropsUnusedOfferings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	ms, marks := seedFile(t, path, 30, false)
	s := openBolt(t, path, BoltOptions{})
	for i := range ms { // every pool label changes: 3 offerings unused
		ms[i].Labels = map[string]string{"pool": "new"}
	}
	must(t, s.Commit(t.Context(), record.Batch{Machines: ms}))
	must(t, s.Close())
	id := storeID(t, path)
	res, err := Compact(path, CompactOptions{})
	must(t, err)
	if res.Offerings != 1 {
		t.Fatalf("%d offerings after compaction, want 1", res.Offerings)
	}
	requireFile(t, path, ms, marks, id)
}

// A file in use is refused, and left alone.
func TestCompactRefusesOpenFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	seedFile(t, path, 10, false)
	s := openBolt(t, path, BoltOptions{})
	defer s.Close()
	_, err := Compact(path, CompactOptions{LockTimeout: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("compact of a file in use: %v", err)
	}
	must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine("after")}}))
}

// A provider that waited for the lock while Compact ran opens the new file,
// not the old one renamed over (whose writes would be lost).
func TestOpenAfterCompactionSeesNewFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	ms, marks := seedFile(t, path, 2000, true)
	id := storeID(t, path)
	started := make(chan struct{})
	opened := make(chan *Bolt, 1)
	go func() {
		<-started
		s, err := OpenBolt(path, BoltOptions{LockTimeout: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		opened <- s
	}()
	_, err := Compact(path, CompactOptions{Progress: func(int) {
		select {
		case <-started:
		default:
			close(started)
			time.Sleep(50 * time.Millisecond) // the opener is now waiting for the lock
		}
	}})
	must(t, err)
	s := <-opened
	if s == nil {
		t.FailNow()
	}
	must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine("late")}}))
	must(t, s.Close())
	requireFile(t, path, append(ms, sampleMachine("late")), marks, id)
}

const (
	compactEnv = "STORE_COMPACT_CHILD_PATH"
	killChunk  = 1000 // records per transaction of the killed compactions
)

// TestCompactChild is the child half of TestCompactKilled: it compacts the
// file, printing a line per transaction, slowly enough to be killed midway.
func TestCompactChild(t *testing.T) {
	path := os.Getenv(compactEnv)
	if path == "" {
		t.Skip("child of TestCompactKilled only")
	}
	_, err := Compact(path, CompactOptions{LockTimeout: 10 * time.Second, chunk: killChunk, Progress: func(n int) {
		os.Stdout.WriteString("progress " + strconv.Itoa(n) + "\n")
		time.Sleep(20 * time.Millisecond)
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.WriteString("done\n")
	os.Exit(0)
}

// SIGKILL at any moment of a compaction leaves a file that opens with
// everything in it, and a later compaction completes.
func TestCompactKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "state.db")
	ms, marks := seedFile(t, path, 3*killChunk, true)
	id := storeID(t, path) // opening upgrades the schema; the records stay JSON
	// Kill after the first transaction, after the second, and at once.
	for _, after := range []int{1, 2, 0} {
		killCompaction(t, path, after)
		requireFile(t, path, ms, marks, id)
	}
	res, err := Compact(path, CompactOptions{})
	must(t, err)
	if res.Machines != len(ms) {
		t.Fatalf("final compaction: %+v", res)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the killed runs' temporary file is left: %v", err)
	}
	requireFile(t, path, ms, marks, id)
}

// killCompaction runs TestCompactChild and SIGKILLs it once it has
// reported `after` transactions (0: as soon as it started).
func killCompaction(t *testing.T, path string, after int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCompactChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), compactEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	if after == 0 {
		time.Sleep(5 * time.Millisecond)
		must(t, cmd.Process.Signal(syscall.SIGKILL))
	}
	sc := bufio.NewScanner(stdout)
	seen := 0
	for sc.Scan() {
		if sc.Text() == "done" {
			t.Fatalf("compaction finished before the kill (after %d)", after)
		}
		if strings.HasPrefix(sc.Text(), "progress ") {
			if seen++; seen == after {
				must(t, cmd.Process.Signal(syscall.SIGKILL))
			}
		}
	}
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child not killed by SIGKILL (after %d): %v", after, cmd.ProcessState)
	}
}
