package store

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)

// sampleMachine builds a record with every field set, derived from id so a
// reader can recompute what it should find.
func sampleMachine(id string) record.Machine {
	return record.Machine{
		ID:                      id,
		State:                   record.Configuring,
		Host:                    record.HostRef{Provider: "libvirt-a", Ref: "zone-1/" + id},
		InstanceType:            "m.large",
		Zone:                    "zone-1",
		CapacityType:            record.CapacitySpot,
		PricePerHour:            0.125,
		InterruptionProbability: 0.05,
		Resources:               map[string]string{"cpu": "2", "memory": "4Gi"},
		Allocatable:             map[string]string{"cpu": "4", "memory": "8Gi"},
		Labels:                  map[string]string{"pool": "a", "id": id},
		LastError:               "previous: \"quoted\"\nline2",
		Cluster:                 "cluster-" + id,
		ShardMetadata: map[string]string{
			"nul":     "a\x00b",
			"ctl":     "\x01\x1f\x7f\t\r\n",
			"uni":     "žluťoučký 🐴 ✓ \u2028\u2029",
			"empty":   "",
			"\x00key": "v",
			"id":      id,
		},
		VCPU:        4,
		MemoryMiB:   8192,
		Domain:      "bf-" + id,
		OperationID: "op-" + id,
		OpKind:      record.OpConfigure,
		OpDeadline:  t0.Add(10 * time.Minute),
		DrainGrace:  30,
		StateSince:  t0,
		Revision:    1<<63 + 7,
		History: []record.Transition{
			{OperationID: "op-0", Kind: record.OpCreate, From: record.Speculative,
				To: record.Idle, Started: t0.Add(-time.Hour), Ended: t0.Add(-59 * time.Minute),
				Outcome: "succeeded"},
			{OperationID: "op-" + id, Kind: record.OpConfigure, From: record.Idle,
				To: record.Configured, Started: t0, Outcome: "running", LastError: "x"},
		},
	}
}

// normalize maps representation-only differences to one form: a stored
// record may come back with nil for an empty map or slice and with times in
// UTC. Everything else must be identical.
func normalize(m record.Machine) record.Machine {
	m = m.Clone()
	for _, p := range []*map[string]string{&m.Resources, &m.Allocatable, &m.Labels, &m.ShardMetadata} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	if len(m.History) == 0 {
		m.History = nil
	}
	utc := func(t *time.Time) {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	utc(&m.OpDeadline)
	utc(&m.StateSince)
	for i := range m.History {
		utc(&m.History[i].Started)
		utc(&m.History[i].Ended)
	}
	return m
}

func requireSameMachine(t testing.TB, got, want record.Machine) {
	t.Helper()
	if g, w := normalize(got), normalize(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("machine %q differs:\n got %+v\nwant %+v", want.ID, g, w)
	}
}

func byID(ms []record.Machine) map[string]record.Machine {
	out := make(map[string]record.Machine, len(ms))
	for _, m := range ms {
		out[m.ID] = m
	}
	return out
}

func requireSnapshot(t testing.TB, snap record.Snapshot, want []record.Machine, marks map[record.MarkKey]record.Mark) {
	t.Helper()
	got := byID(snap.Machines)
	if len(got) != len(snap.Machines) {
		t.Fatalf("duplicate machine ids in snapshot: %d records, %d ids", len(snap.Machines), len(got))
	}
	if len(got) != len(want) {
		t.Fatalf("snapshot has %d machines, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[w.ID]
		if !ok {
			t.Fatalf("machine %q missing", w.ID)
		}
		requireSameMachine(t, g, w)
	}
	if !maps.Equal(snap.Marks, marks) {
		t.Fatalf("marks = %v, want %v", snap.Marks, marks)
	}
}

// roundTripCases are the records every store must return unchanged.
func roundTripCases() []record.Machine {
	full := sampleMachine("full")
	zoned := sampleMachine("zoned")
	zoned.StateSince = time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("X", -7*3600))
	return []record.Machine{
		full,
		zoned,
		{ID: "minimal", State: record.Speculative},
		{ID: "empty-values", State: record.Idle, Labels: map[string]string{"": ""},
			ShardMetadata: map[string]string{"k": ""}, Resources: map[string]string{}},
		{ID: "ünï\x00cødé/" + strings.Repeat("x", 200), State: record.Failed,
			LastError: "timed out after 5m0s\x00", PricePerHour: 1e300},
	}
}

func roundTripMarks() map[record.MarkKey]record.Mark {
	const max = int64(^uint64(0) >> 1)
	return map[record.MarkKey]record.Mark{
		{ShardID: "s1", MachineID: "full"}:        {Epoch: max, Sequence: max},
		{ShardID: "s1", MachineID: "minimal"}:     {Epoch: 0, Sequence: 0},
		{ShardID: "s2", MachineID: "full"}:        {Epoch: 3, Sequence: max},
		{ShardID: "ü", MachineID: "a\x00b"}:       {Epoch: 1, Sequence: 2},
		{ShardID: "a\x00b", MachineID: "c"}:       {Epoch: 1, Sequence: 3},
		{ShardID: "a", MachineID: "\x00bc"}:       {Epoch: 1, Sequence: 4},
		{ShardID: "", MachineID: "unknown-id"}:    {Epoch: 5, Sequence: 1},
		{ShardID: "s", MachineID: fmt.Sprint(99)}: {Epoch: 1 << 40, Sequence: 1 << 50},
	}
}
