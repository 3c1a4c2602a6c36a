package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// encodeMachineJSON is the schema 1 codec (JSON of record.Machine), kept
// for tests: it writes records as the previous versions did.
func encodeMachineJSON(t testing.TB, m *record.Machine) []byte {
	t.Helper()
	v, err := json.Marshal(m)
	must(t, err)
	return v
}

// copyFixture copies testdata/schema1.db, a state file written by the
// previous version (JSON records, schema 1): `bin/libvirt
// --use-fake-backend --seed-count=4 --provider=fixture`, then Create of
// zone-a-kvm-small-0000 and of zone-b-kvm-small-0001 (fencing token
// shard-7/3/9), then Configure of zone-a-kvm-small-0000 (cluster c1,
// shard_metadata {"k": "v\x00x", "zone": "ž"}).
func copyFixture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/schema1.db")
	must(t, err)
	path := filepath.Join(t.TempDir(), "state.db")
	must(t, os.WriteFile(path, b, 0o600))
	return path
}

// rawRecords reads the machines bucket without the store: key -> value.
func rawRecords(t *testing.T, path string) (map[string][]byte, uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	must(t, err)
	defer db.Close()
	out := map[string][]byte{}
	var schema uint64
	must(t, db.View(func(tx *bolt.Tx) error {
		schema = binary.BigEndian.Uint64(tx.Bucket(bucketMeta).Get(keySchema))
		return tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	}))
	return out, schema
}

// A file written by the previous version opens and loads unchanged; the
// open upgrades its schema; a record written afterwards is binary while
// the others stay JSON, and the mixed file loads whole after a reopen.
func TestSchema1FileMigrates(t *testing.T) {
	t.Parallel()
	path := copyFixture(t)
	raw, schema := rawRecords(t, path)
	if schema != 1 || len(raw) != 4 {
		t.Fatalf("fixture: schema %d, %d records; want 1, 4", schema, len(raw))
	}
	want := map[string]record.Machine{}
	for k, v := range raw {
		if v[0] != '{' {
			t.Fatalf("fixture record %s is not JSON", k)
		}
		var m record.Machine
		must(t, json.Unmarshal(v, &m))
		want[k] = m
	}

	s := openBolt(t, path, BoltOptions{KeepFormat: true})
	snap, err := s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, values(want), map[record.MarkKey]record.Mark{
		{ShardID: "shard-7", MachineID: "zone-b-kvm-small-0001"}: {Epoch: 3, Sequence: 9},
	})
	got := byID(snap.Machines)
	cfg := got["zone-a-kvm-small-0000"]
	if cfg.State != record.Configured || cfg.ShardMetadata["k"] != "v\x00x" || cfg.Cluster != "c1" ||
		len(cfg.History) != 2 || cfg.Labels["topology.kubernetes.io/zone"] != "zone-a" {
		t.Fatalf("configured fixture machine: %+v", cfg)
	}

	changed := cfg.Clone()
	changed.State, changed.Revision = record.Draining, cfg.Revision+100
	must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{changed}}))
	want[changed.ID] = changed
	must(t, s.Close())

	raw, schema = rawRecords(t, path)
	if schema != schemaVersion {
		t.Fatalf("schema after open = %d, want %d", schema, schemaVersion)
	}
	for k, v := range raw {
		if isBinary := v[0] == formatBinaryV1; isBinary != (k == changed.ID) {
			t.Fatalf("record %s: format 0x%02x after one rewrite", k, v[0])
		}
	}
	s = openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err = s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, values(want), map[record.MarkKey]record.Mark{
		{ShardID: "shard-7", MachineID: "zone-b-kvm-small-0001"}: {Epoch: 3, Sequence: 9},
	})
}

func values(m map[string]record.Machine) []record.Machine {
	out := make([]record.Machine, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// fixtureWant is the fixture's content, read as the previous version did.
func fixtureWant(t *testing.T, path string) []record.Machine {
	t.Helper()
	raw, _ := rawRecords(t, path)
	var out []record.Machine
	for _, v := range raw {
		var m record.Machine
		must(t, json.Unmarshal(v, &m))
		out = append(out, m)
	}
	return out
}

var fixtureMarks = map[record.MarkKey]record.Mark{
	{ShardID: "shard-7", MachineID: "zone-b-kvm-small-0001"}: {Epoch: 3, Sequence: 9},
}

// By default the first open compacts a schema 1 file: every record is
// binary afterwards, nothing is lost, and the log says so.
func TestSchema1FileCompactedOnOpen(t *testing.T) {
	t.Parallel()
	path := copyFixture(t)
	want := fixtureWant(t, path)
	var logs bytes.Buffer
	s := openBolt(t, path, BoltOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, want, fixtureMarks)
	if !strings.Contains(logs.String(), `"msg":"state file migrated to the compact format`) ||
		!strings.Contains(logs.String(), `"machines":4`) {
		t.Fatalf("log: %s", logs.String())
	}
	must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine("new")}}))
	must(t, s.Close())
	raw, schema := rawRecords(t, path)
	for k, v := range raw {
		if v[0] != formatBinaryV1 {
			t.Fatalf("record %s: format 0x%02x after the migration", k, v[0])
		}
	}
	if schema != schemaVersion || len(raw) != 5 {
		t.Fatalf("schema %d, %d records", schema, len(raw))
	}
}

// If the migration cannot run (here: its temporary file cannot be
// replaced), the file opens as it is, with a warning naming the cause.
func TestSchema1FileMigrationFails(t *testing.T) {
	t.Parallel()
	path := copyFixture(t)
	want := fixtureWant(t, path)
	must(t, os.MkdirAll(filepath.Join(path+".compact", "busy"), 0o700))
	var logs bytes.Buffer
	s := openBolt(t, path, BoltOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	requireSnapshot(t, snap, want, fixtureMarks)
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"state file not migrated`) ||
		!strings.Contains(logs.String(), "remove leftover") {
		t.Fatalf("log: %s", logs.String())
	}
}

// A file from a newer version (schema 3) is refused at open, saying so.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	must(t, openBolt(t, path, BoltOptions{}).Close())
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, be64(3)) }))
	must(t, db.Close())
	_, err = OpenBolt(path, BoltOptions{})
	if err == nil || !strings.Contains(err.Error(), "unsupported schema") {
		t.Fatalf("open of a schema 3 file: %v", err)
	}
}
