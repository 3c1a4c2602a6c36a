package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Group commit. Callers encode their batch (in parallel, on their own
// goroutines) and hand it to one committer goroutine. The committer takes
// whatever is queued — everything that arrived while the previous fsync was
// running — and writes it in one transaction with one fsync. There is no
// timer: a lone caller is committed at once, and under load batches grow by
// themselves to the number of callers waiting. Every transaction writes only
// the queued records, so its cost is O(batch), never O(fleet).

type kv struct{ k, v []byte }

// bulkRecords is the size from which a transaction is a bulk write.
const bulkRecords = 1024

// request is one Commit call, already encoded.
type request struct {
	machines []kv
	marks    []kv
	drop     [][]byte // fence mark keys to delete (Batch.DropMarks)
	// offerings its records refer to that were not known durable when it
	// was encoded: written in the same transaction (see offeringTable).
	offerings   []kv
	offeringIDs []uint64
	rebuilding  map[string]bool // record.Batch.Rebuilding
	done        chan error      // buffered (1): the committer never blocks on it
}

func (r *request) records() int {
	return len(r.machines) + len(r.marks) + len(r.drop) + len(r.rebuilding)
}

// Commit makes b durable. It returns nil only after the transaction that
// holds b has been fsynced. Once enqueued, the batch is committed even if ctx
// is cancelled, so the caller waits for the outcome rather than guess it.
func (s *Bolt) Commit(ctx context.Context, b record.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := s.encodeBatch(b)
	if err != nil {
		return err
	}
	if req.records() == 0 {
		return nil
	}
	if err := s.enqueue(ctx, req); err != nil {
		return err
	}
	return <-req.done
}

func (s *Bolt) enqueue(ctx context.Context, req *request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	select {
	case s.queue <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Bolt) encodeBatch(b record.Batch) (*request, error) {
	if err := validate(b); err != nil {
		return nil, err
	}
	req := &request{
		machines:   make([]kv, 0, len(b.Machines)),
		marks:      make([]kv, 0, len(b.Marks)),
		rebuilding: b.Rebuilding,
		done:       make(chan error, 1),
	}
	for i := range b.Machines {
		m := &b.Machines[i]
		off, write := s.offerings.ref(encodeOffering(m))
		if write && !slices.Contains(req.offeringIDs, off) { // a batch has few offerings
			req.offeringIDs = append(req.offeringIDs, off)
			req.offerings = append(req.offerings, s.offerings.entry(off))
		}
		req.machines = append(req.machines, kv{[]byte(m.ID), encodeRecord(m, off)})
	}
	for k, m := range b.Marks {
		req.marks = append(req.marks, kv{markKey(k), markValue(m)})
	}
	for _, k := range b.DropMarks {
		req.drop = append(req.drop, markKey(k))
	}
	return req, nil
}

// committer runs until the queue is closed and drained.
func (s *Bolt) committer() {
	defer close(s.done)
	batch := make([]*request, 0, s.opts.MaxBatch)
	for first := range s.queue {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commitBatch(batch)
		clear(batch) // drop references for the GC
	}
}

// commitBatch writes the requests in one transaction. If it fails and held
// more than one request, each is retried alone, so a failure is reported
// only to the caller(s) it belongs to. Puts are idempotent, so a retry after
// a rolled-back transaction is harmless.
func (s *Bolt) commitBatch(batch []*request) {
	s.stats.Lock()
	s.stats.Commits += uint64(len(batch))
	s.stats.Unlock()
	err := s.write(batch)
	if err != nil && len(batch) > 1 {
		for _, r := range batch {
			r.done <- s.write([]*request{r})
		}
		return
	}
	for _, r := range batch {
		r.done <- err
	}
}

func (s *Bolt) write(batch []*request) error {
	start := time.Now()
	records := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		machines, marks, offerings := tx.Bucket(bucketMachines), tx.Bucket(bucketMarks), tx.Bucket(bucketOfferings)
		for _, r := range batch {
			records += r.records()
		}
		if records >= bulkRecords {
			// A bulk write (the first start's seeding) fills the pages it
			// creates instead of leaving them half empty for inserts that
			// will not come: the file is about half the size.
			machines.FillPercent, marks.FillPercent = 1, 1
		}
		for _, r := range batch {
			for _, e := range r.offerings {
				if err := offerings.Put(e.k, e.v); err != nil {
					return putErr("offering", e.k, e.v, err)
				}
			}
			for _, e := range r.machines {
				if err := machines.Put(e.k, e.v); err != nil {
					return putErr("machine", e.k, e.v, err)
				}
			}
			for _, e := range r.marks {
				if err := marks.Put(e.k, e.v); err != nil {
					return putErr("fence mark", e.k, e.v, err)
				}
			}
			for _, k := range r.drop {
				if err := marks.Delete(k); err != nil {
					return fmt.Errorf("store: delete fence mark: %w", err)
				}
			}
			if err := putRebuilding(tx.Bucket(bucketMeta), r.rebuilding); err != nil {
				return fmt.Errorf("store: zones rebuilding: %w", err)
			}
		}
		return nil
	})
	s.stats.Lock()
	s.stats.Transactions++
	s.stats.Unlock()
	if err != nil {
		return fmt.Errorf("store: commit to %s: %w", s.path, err)
	}
	for _, r := range batch {
		s.offerings.committed(r.offeringIDs)
	}
	if s.opts.OnCommit != nil {
		s.opts.OnCommit(time.Since(start), records)
	}
	return nil
}
