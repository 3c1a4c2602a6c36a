package intents

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Store is a record.Store that also journals what the hosts cannot hold
// (Content) before a Commit returns. Load and Close are the local store's.
type Store struct {
	inner record.Store
	j     *Journal
	log   *slog.Logger

	mu      sync.Mutex
	durable Content // what the journal holds (as last written or claimed)
	// encoded is durable's wire form, nil until the first write encodes
	// all of it; after, each write re-encodes only what it changed.
	encoded map[string][]byte
	queue   []*change // waiting for the next write, in commit order
	writing bool      // a flusher is running
	// tracked are the ids transitional or ended in durable or in a queued
	// change: a commit that ends one's transition, or changes an ended
	// one, must reach the journal too.
	tracked map[string]bool
	stats   Stats
}

// Stats count the journal's writes, for tests and figures.
type Stats struct {
	Writes  int           // ConfigMap updates that succeeded
	Failed  int           // that failed (their commits were refused)
	Carried int           // changes those writes carried (Carried/Writes: the coalescing)
	Bytes   int           // the journal's encoded size after the last write
	Took    time.Duration // the last write's duration, encoding included
}

var _ record.Store = (*Store)(nil)

// NewStore journals inner's commits in j, starting from start (what
// j.Claim returned; the caller has put its records and marks in inner).
func NewStore(inner record.Store, j *Journal, start Content, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{inner: inner, j: j, log: log, durable: start.clone(), tracked: map[string]bool{}}
	s.retrack()
	return s
}

// Load is the local store's.
func (s *Store) Load(ctx context.Context) (record.Snapshot, error) { return s.inner.Load(ctx) }

// Close is the local store's. A write in flight finishes by its own
// bound; its commits have been refused or will be.
func (s *Store) Close() error { return s.inner.Close() }

// Stats is a copy of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Commit commits b locally, then, if b changes what the journal holds,
// waits until the journal holds it. An error means b must be treated as
// not committed (the engine refuses the call, Unavailable with the
// cause); the local store is then ahead of the engine, which is harmless:
// it is read only at startup, and a replica under --leader-elect sets its
// file aside at startup.
func (s *Store) Commit(ctx context.Context, b record.Batch) error {
	if err := s.inner.Commit(ctx, b); err != nil {
		return err
	}
	c := s.changeOf(b)
	if c == nil {
		return nil
	}
	return s.submit(ctx, c)
}

// SaveHostFile journals the admin API's host file of kind (HostCordons,
// HostDowns), verbatim, before the change is applied or acknowledged.
func (s *Store) SaveHostFile(ctx context.Context, kind string, data []byte) error {
	return s.submit(ctx, &change{hosts: map[string][]byte{kind: data}})
}

// change is one commit's effect on the journal.
type change struct {
	transitional map[string]*record.Machine
	ended        map[string]*record.Machine // left its transition (or changed since)
	marks        map[record.MarkKey]record.Mark
	drop         []record.MarkKey
	hosts        map[string][]byte
	done         chan error
}

func (c *change) applyTo(to Content) {
	for id, m := range c.transitional {
		to.Transitional[id] = *m
		delete(to.Ended, id)
	}
	for id, m := range c.ended {
		delete(to.Transitional, id)
		to.Ended[id] = *m
	}
	for k, m := range c.marks {
		to.Marks[k] = m
	}
	for _, k := range c.drop {
		delete(to.Marks, k)
	}
	for kind, data := range c.hosts {
		to.Hosts[kind] = data
	}
}

// markDirty adds the buckets whose marks c changes (dirty nil: all are).
func (c *change) markDirty(dirty map[int]bool) {
	if dirty == nil {
		return
	}
	for k := range c.marks {
		dirty[bucketOf(k.MachineID)] = true
	}
	for _, k := range c.drop {
		dirty[bucketOf(k.MachineID)] = true
	}
}

// changeOf is b's effect on the journal, nil if none.
func (s *Store) changeOf(b record.Batch) *change {
	c := &change{marks: maps.Clone(b.Marks), drop: slices.Clone(b.DropMarks)}
	s.mu.Lock()
	for i := range b.Machines {
		m := &b.Machines[i]
		switch {
		case m.State.Transitional():
			cp := m.Clone()
			c.setTransitional(m.ID, &cp)
		case s.tracked[m.ID]:
			cp := m.Clone()
			c.setEnded(m.ID, &cp)
		}
	}
	s.mu.Unlock()
	if len(c.transitional) == 0 && len(c.ended) == 0 && len(c.marks) == 0 && len(c.drop) == 0 {
		return nil
	}
	return c
}

func (c *change) setTransitional(id string, m *record.Machine) {
	if c.transitional == nil {
		c.transitional = map[string]*record.Machine{}
	}
	c.transitional[id] = m
}

func (c *change) setEnded(id string, m *record.Machine) {
	if c.ended == nil {
		c.ended = map[string]*record.Machine{}
	}
	c.ended[id] = m
}

// submit queues c and waits for the write that carries it. Changes that
// arrive while a write is in flight share the next one (group commit).
func (s *Store) submit(ctx context.Context, c *change) error {
	c.done = make(chan error, 1)
	s.mu.Lock()
	s.queue = append(s.queue, c)
	for id := range c.transitional {
		s.tracked[id] = true
	}
	for id := range c.ended {
		s.tracked[id] = true
	}
	if !s.writing {
		s.writing = true
		go s.flush()
	}
	s.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		// The write may still land: a call not acknowledged may or may
		// not take effect, as with any store.
		return ctx.Err()
	}
}

// flush writes the queue until it is empty, one ConfigMap update per
// round, each carrying every change queued since the last.
func (s *Store) flush() {
	for {
		s.mu.Lock()
		group := s.queue
		s.queue = nil
		if len(group) == 0 {
			s.writing = false
			s.mu.Unlock()
			return
		}
		next := s.durable.clone()
		parts := maps.Clone(s.encoded)
		s.mu.Unlock()
		var dirty map[int]bool // nil: all (the first write)
		if parts != nil {
			dirty = map[int]bool{}
		} else {
			parts = map[string][]byte{}
		}
		for _, c := range group {
			c.applyTo(next)
			c.markDirty(dirty)
		}
		next.pruneEnded(time.Now())
		start := time.Now()
		err := encodeInto(parts, next, dirty)
		if err == nil {
			err = s.j.write(context.Background(), parts)
		}
		s.mu.Lock()
		if err == nil {
			s.durable, s.encoded = next, parts
			s.stats.Writes++
			s.stats.Carried += len(group)
			s.stats.Bytes = size(parts)
			s.stats.Took = time.Since(start)
		} else {
			s.stats.Failed++
		}
		s.retrack()
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("journal write failed: the calls it carried are refused, the journal is unchanged",
				slog.String("journal", s.j.Name()), slog.Int("changes", len(group)), slog.Any("error", err))
		}
		for _, c := range group {
			c.done <- err
		}
	}
}

// retrack recomputes tracked from durable and the queue (s.mu held).
func (s *Store) retrack() {
	clear(s.tracked)
	for id := range s.durable.Transitional {
		s.tracked[id] = true
	}
	for id := range s.durable.Ended {
		s.tracked[id] = true
	}
	for _, c := range s.queue {
		for id := range c.transitional {
			s.tracked[id] = true
		}
		for id := range c.ended {
			s.tracked[id] = true
		}
	}
}
