package store

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Load reads everything in one read transaction (a consistent snapshot).
// It runs once at startup, where its cost is decoding the whole fleet, so
// records are decoded on all CPUs. Offerings are decoded once and shared
// by their records. The values point into bbolt's mmap, valid until the
// transaction ends, so decoding finishes inside it.
func (s *Bolt) Load(ctx context.Context) (record.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return record.Snapshot{}, ErrClosed
	}
	snap := record.Snapshot{StoreID: s.id, Marks: make(map[record.MarkKey]record.Mark)}
	err := s.db.View(func(tx *bolt.Tx) error {
		offerings, err := readOfferings(tx)
		if err != nil {
			return err
		}
		snap.Rebuilding = readRebuilding(tx.Bucket(bucketMeta))
		machines := tx.Bucket(bucketMachines)
		var raw []kv
		err = machines.ForEach(func(k, v []byte) error {
			raw = append(raw, kv{k, v})
			return nil
		})
		if err != nil {
			return err
		}
		if snap.Machines, err = decodeAll(ctx, raw, offerings); err != nil {
			return err
		}
		return tx.Bucket(bucketMarks).ForEach(func(k, v []byte) error {
			key, err := parseMarkKey(k)
			if err != nil {
				return err
			}
			mark, err := parseMarkValue(v)
			snap.Marks[key] = mark
			return err
		})
	})
	if err != nil {
		return record.Snapshot{}, fmt.Errorf("store: load %s: %w", s.path, err)
	}
	return snap, nil
}

// decodeAll decodes raw machine records in parallel, keeping their order.
func decodeAll(ctx context.Context, raw []kv, offerings map[uint64]*offering) ([]record.Machine, error) {
	lookup := func(id uint64) (*offering, bool) {
		o, ok := offerings[id]
		return o, ok
	}
	out := make([]record.Machine, len(raw))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(raw)/256))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(raw)/workers, (w+1)*len(raw)/workers
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				if i%1024 == 0 && ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				m, err := decodeMachine(raw[i].k, raw[i].v, lookup)
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = m
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
