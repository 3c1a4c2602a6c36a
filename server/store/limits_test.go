package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// TestOverLimitRecordsAreTooLarge: a key over bbolt's limit is the
// request's fault (record.ErrTooLarge, which the engine answers
// InvalidArgument), named by what and how large, never a store failure
// (Unavailable, retried forever). The store stays usable, and the memory
// store refuses the same, so behaviour does not depend on --state.
func TestOverLimitRecordsAreTooLarge(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s record.Store) {
		long := strings.Repeat("k", bolt.MaxKeySize+1)
		cases := []struct {
			name string
			b    record.Batch
			want []string
		}{
			{"machine id", record.Batch{Machines: []record.Machine{sampleMachine(long)}},
				[]string{"machine id is 32769 bytes", "key limit is 32768"}},
			{"mark key", record.Batch{Marks: map[record.MarkKey]record.Mark{{ShardID: strings.Repeat("s", 40000), MachineID: "m"}: {Epoch: 1}}},
				[]string{"fence mark key is", "key limit is 32768"}},
		}
		for _, c := range cases {
			// Alongside a good record: the batch is refused whole.
			c.b.Machines = append(c.b.Machines, sampleMachine("good-"+c.name))
			err := s.Commit(t.Context(), c.b)
			if !errors.Is(err, record.ErrTooLarge) {
				t.Errorf("%s: %v, want ErrTooLarge", c.name, err)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: message %q lacks %q", c.name, err, w)
				}
			}
			if len(err.Error()) > 400 {
				t.Errorf("%s: the message quotes the key (%d bytes)", c.name, len(err.Error()))
			}
		}
		// Still usable, and nothing of the refused batches landed.
		must(t, s.Commit(t.Context(), record.Batch{Machines: []record.Machine{sampleMachine("after")}}))
		snap, err := s.Load(t.Context())
		must(t, err)
		requireSnapshot(t, snap, []record.Machine{sampleMachine("after")}, map[record.MarkKey]record.Mark{})
	})
}

// TestBoltPutLimitsClassified: should a record reach bbolt over its limits
// anyway (validate is the first line), the Put error is still classified
// ErrTooLarge, naming the record without quoting its key.
func TestBoltPutLimitsClassified(t *testing.T) {
	t.Parallel()
	s := openBolt(t, filepath.Join(t.TempDir(), "state.db"), BoltOptions{})
	t.Cleanup(func() { s.Close() })
	big := []byte(strings.Repeat("k", bolt.MaxKeySize+1))
	for _, r := range []*request{{machines: []kv{{big, []byte("{}")}}}, {marks: []kv{{big, make([]byte, markValueLen)}}}} {
		err := s.write([]*request{r})
		if !errors.Is(err, record.ErrTooLarge) || !errors.Is(err, bolt.ErrKeyTooLarge) {
			t.Errorf("put over the key limit: %v", err)
		}
		if err != nil && (strings.Contains(err.Error(), "kkkkkkkk") || !strings.Contains(err.Error(), "32769")) {
			t.Errorf("message must give the size, not the key: %.200s", err)
		}
	}
	for _, e := range []error{bolt.ErrKeyTooLarge, bolt.ErrValueTooLarge} {
		err := putErr("machine", big, nil, fmt.Errorf("wrapped: %w", e))
		if !errors.Is(err, record.ErrTooLarge) {
			t.Errorf("%v is not classified too large: %v", e, err)
		}
	}
	if err := putErr("machine", []byte("m"), nil, errors.New("disk on fire")); errors.Is(err, record.ErrTooLarge) {
		t.Errorf("an ordinary failure classified too large: %v", err)
	}
	must(t, s.write([]*request{{machines: []kv{{[]byte("ok"), []byte("{}")}}}}))
}
