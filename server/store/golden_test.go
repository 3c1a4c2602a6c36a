package store

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The golden files under testdata/golden were written by the hand-written
// protobuf codec this package had before its records came from
// proto/libvirtprovider/store/v1/store.proto (commit "store: golden files
// of today's record codec"). They are the compatibility contract: every
// later codec must decode them to goldenCases and encode goldenCases to
// exactly these bytes (offerings are deduplicated by their bytes, so equal
// offerings must keep encoding equally). Never regenerate them.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current codec (only when the format itself changes)")

var g0 = time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)

// goldenCases are fixed here, not built from the other tests' helpers, so
// that a change to those helpers cannot move the contract.
func goldenCases() map[string]record.Machine {
	long := strings.Repeat("ü", 100) // nested bodies over 127 bytes widen their length
	return map[string]record.Machine{
		"minimal": {ID: "minimal", State: record.Speculative},
		"full": {
			ID: "zone-a-kvm-small-0001", State: record.Configuring,
			Host:         record.HostRef{Provider: "libvirt-a", Ref: "zone-a/bf-0001"},
			InstanceType: "kvm.small", Zone: "zone-a", CapacityType: record.CapacitySpot,
			PricePerHour: 0.125, InterruptionProbability: 0.05,
			Resources:   map[string]string{"cpu": "2", "memory": "4Gi"},
			Allocatable: map[string]string{"cpu": "2", "memory": "3584Mi"},
			Labels:      map[string]string{"pool": "a", "node.kubernetes.io/instance-type": "kvm.small"},
			LastError:   "previous: \"quoted\"\nline2", Cluster: "prod-eu",
			ShardMetadata: map[string]string{"nul": "a\x00b", "uni": "žluťoučký 🐴", "empty": "", "\x00key": "v", "long": long},
			VCPU:          2, MemoryMiB: 4096,
			Domain: "bf-lab-0001", HostName: "hv-2", OperationID: "op-7", OpKind: record.OpConfigure,
			OpDeadline: g0.Add(10 * time.Minute), DrainGrace: 30, StateSince: g0, Revision: 1<<63 + 7,
			History: []record.Transition{
				{OperationID: "op-1", Kind: record.OpCreate, From: record.Speculative, To: record.Idle,
					Started: g0.Add(-time.Hour), Ended: g0.Add(-59 * time.Minute), Outcome: "succeeded"},
				{OperationID: "op-7", Kind: record.OpConfigure, From: record.Idle, To: record.Configured,
					Started: g0, Outcome: "running", LastError: "x", Note: "started again: " + long},
			},
		},
		"extremes": {
			ID: "ünï\x00cødé", State: record.Failed, LastError: "not utf-8: \xff\xfe\x00",
			PricePerHour: math.Copysign(0, -1), InterruptionProbability: math.SmallestNonzeroFloat64,
			CapacityType: -3, VCPU: -1, MemoryMiB: math.MaxInt32, DrainGrace: math.MinInt64,
			Labels:     map[string]string{"": "", "\xff": "\xfe"},
			OpDeadline: time.Unix(-62135596800, 0).UTC(), // year 1
			StateSince: time.Unix(1<<40, 999999999).UTC(),
			Revision:   math.MaxUint64,
			History:    []record.Transition{{}, {From: -1, To: 127, Started: time.Unix(-1, 1).UTC()}},
		},
		"no-offering": {ID: "no-offering", State: record.Idle, Cluster: "c", Revision: 1,
			ShardMetadata: map[string]string{"k": ""}},
	}
}

// goldenOfferingID is the offering reference the golden records carry
// when they have an offering part.
const goldenOfferingID = 1

func goldenPath(name, ext string) string { return filepath.Join("testdata", "golden", name+"."+ext) }

// TestGoldenRecords: the golden bytes decode to goldenCases, and
// goldenCases encode to the golden bytes.
func TestGoldenRecords(t *testing.T) {
	t.Parallel()
	for name, want := range goldenCases() {
		off := encodeOffering(&want)
		id := uint64(0)
		if len(off) > 1 {
			id = goldenOfferingID
		}
		rec := encodeRecord(&want, id)
		if *updateGolden {
			must(t, os.MkdirAll(filepath.Dir(goldenPath(name, "record")), 0o755))
			must(t, os.WriteFile(goldenPath(name, "record"), rec, 0o644))
			must(t, os.WriteFile(goldenPath(name, "offering"), off, 0o644))
		}
		goldRec, err := os.ReadFile(goldenPath(name, "record"))
		must(t, err)
		goldOff, err := os.ReadFile(goldenPath(name, "offering"))
		must(t, err)
		if !bytes.Equal(rec, goldRec) {
			t.Errorf("%s: record encodes to\n%x\nwant (golden)\n%x", name, rec, goldRec)
		}
		if !bytes.Equal(off, goldOff) {
			t.Errorf("%s: offering encodes to\n%x\nwant (golden)\n%x", name, off, goldOff)
		}
		o, err := decodeOffering(goldOff)
		must(t, err)
		got, err := decodeMachine([]byte(want.ID), goldRec, func(n uint64) (*offering, bool) {
			return o, n == goldenOfferingID
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !sameMachine(got, want) {
			t.Errorf("%s: golden record decodes to\n%+v\nwant\n%+v", name, got, want)
		}
	}
}

// sameMachine is reflect.DeepEqual after normalize, with floats compared
// by their bits (-0 is not +0 to the codec).
func sameMachine(got, want record.Machine) bool {
	g, w := normalize(got), normalize(want)
	if math.Float64bits(g.PricePerHour) != math.Float64bits(w.PricePerHour) ||
		math.Float64bits(g.InterruptionProbability) != math.Float64bits(w.InterruptionProbability) {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// TestGoldenStateFile: testdata/golden/state-v1.db, a whole state file
// written by the hand-written codec (goldenCases and roundTripMarks,
// committed in one batch), loads with the current code unchanged.
func TestGoldenStateFile(t *testing.T) {
	t.Parallel()
	var want []record.Machine
	for _, m := range goldenCases() {
		want = append(want, m)
	}
	src := filepath.Join("testdata", "golden", "state-v1.db")
	if *updateGolden {
		os.Remove(src)
		must(t, os.MkdirAll(filepath.Dir(src), 0o755))
		s := openBolt(t, src, BoltOptions{})
		must(t, s.Commit(t.Context(), record.Batch{Machines: want, Marks: roundTripMarks()}))
		must(t, s.Close())
	}
	b, err := os.ReadFile(src)
	must(t, err)
	path := filepath.Join(t.TempDir(), "state.db")
	must(t, os.WriteFile(path, b, 0o600))
	s := openBolt(t, path, BoltOptions{})
	defer s.Close()
	snap, err := s.Load(t.Context())
	must(t, err)
	got := byID(snap.Machines)
	if len(got) != len(want) {
		t.Fatalf("loaded %d machines, want %d", len(got), len(want))
	}
	for _, w := range want {
		if !sameMachine(got[w.ID], w) {
			t.Errorf("%q loads as\n%+v\nwant\n%+v", w.ID, got[w.ID], w)
		}
	}
	if !reflect.DeepEqual(snap.Marks, roundTripMarks()) {
		t.Errorf("marks = %v, want %v", snap.Marks, roundTripMarks())
	}
}

// BenchmarkEncodeRecord and BenchmarkDecodeRecord time the codec alone on
// the "full" golden record (an offering and two history entries), as
// Commit and Load use it (docs/benchmarks.md).
func BenchmarkEncodeRecord(b *testing.B) {
	m := goldenCases()["full"]
	b.ReportAllocs()
	for b.Loop() {
		_ = encodeOffering(&m)
		_ = encodeRecord(&m, goldenOfferingID)
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	m := goldenCases()["full"]
	rec := encodeRecord(&m, goldenOfferingID)
	o, err := decodeOffering(encodeOffering(&m))
	must(b, err)
	lookup := func(uint64) (*offering, bool) { return o, true }
	key := []byte(m.ID)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeMachine(key, rec, lookup); err != nil {
			b.Fatal(err)
		}
	}
}
