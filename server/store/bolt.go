package store

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// File layout (schema version 2):
//
//	meta:      "id" -> store id (8 bytes BE), "schema" -> version (8 bytes BE)
//	machines:  machine id -> record (format byte, then fields; record.go)
//	offerings: offering id (8 bytes BE) -> shared part of records (offering.go)
//	marks:     uvarint(len(shardID)) shardID machineID -> epoch, seq (8+8 bytes BE)
//
// Schema 1 had no offerings bucket and JSON records. Opening a schema 1
// file upgrades it to 2 in place: the bucket is added and the version
// bumped (so an older binary refuses the file instead of failing on a
// binary record); its JSON records still load and are rewritten in the
// binary format when next written, or all at once by Compact.
var (
	bucketMeta      = []byte("meta")
	bucketMachines  = []byte("machines")
	bucketOfferings = []byte("offerings")
	bucketMarks     = []byte("marks")
	keyStoreID      = []byte("id")
	keySchema       = []byte("schema")
)

const schemaVersion = 2

// BoltOptions tunes OpenBolt. The zero value is a good default.
type BoltOptions struct {
	// LockTimeout bounds the wait for the file lock; another process holding
	// the file makes OpenBolt fail after it. Default 1s.
	LockTimeout time.Duration
	// MaxBatch caps how many Commit calls share one transaction, bounding the
	// latency the last caller in a batch pays. Default 256.
	MaxBatch int
	// OnCommit, if set, is called after every durable transaction with its
	// duration (begin to fsync done) and the number of records written
	// (machines + marks). It runs on the committer goroutine: keep it cheap.
	OnCommit func(d time.Duration, records int)
	// Logger receives the one-time migration of a schema 1 file (see
	// migrateOnOpen). Nil discards.
	Logger *slog.Logger
	// KeepFormat opens a schema 1 file without compacting it: its records
	// then migrate one by one as they are written.
	KeepFormat bool
}

// Bolt is the durable record.Store on one bbolt file.
type Bolt struct {
	db        *bolt.DB
	path      string
	id        uint64
	opts      BoltOptions
	offerings *offeringTable

	// mu guards closed and the send side of queue: Commit holds it shared
	// while enqueueing, Close exclusively while closing the queue.
	mu     sync.RWMutex
	closed bool
	queue  chan *request
	done   chan struct{} // closed when the committer has drained and exited

	stats struct {
		sync.Mutex
		BoltStats
	}
}

var _ record.Store = (*Bolt)(nil)

// BoltStats counts group-commit work since open.
type BoltStats struct {
	Commits      uint64 // Commit calls that reached the committer
	Transactions uint64 // bbolt write transactions run for them
}

// OpenBolt opens (creating if needed) the state file at path.
func OpenBolt(path string, opts BoltOptions) (*Bolt, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	db, err := openLocked(path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	if db, err = migrateOnOpen(db, path, opts); err != nil {
		return nil, err
	}
	s := &Bolt{db: db, path: path, opts: opts, offerings: newOfferingTable(),
		queue: make(chan *request, opts.MaxBatch),
		done:  make(chan struct{}),
	}
	if err := s.initMeta(); err != nil {
		db.Close()
		return nil, err
	}
	go s.committer()
	return s, nil
}

// initMeta creates the buckets and the store id on a new file, and checks
// the schema of an existing one.
func (s *Bolt) initMeta() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMachines, bucketMarks, bucketOfferings} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("store: %s: create bucket %s: %w", s.path, name, err)
			}
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return fmt.Errorf("store: %s: create bucket meta: %w", s.path, err)
		}
		if err := checkSchema(meta.Get(keySchema)); err != nil {
			return fmt.Errorf("store: %s: %w", s.path, err)
		}
		if err := meta.Put(keySchema, be64(schemaVersion)); err != nil {
			return err
		}
		if err := s.offerings.load(tx); err != nil {
			return fmt.Errorf("store: %s: %w", s.path, err)
		}
		if v := meta.Get(keyStoreID); len(v) == 8 {
			s.id = binary.BigEndian.Uint64(v)
			return nil
		} else if v != nil {
			return fmt.Errorf("store: %s: corrupt store id", s.path)
		}
		s.id = newStoreID()
		return meta.Put(keyStoreID, be64(s.id))
	})
}

// checkSchema accepts a new file (nil), schema 1 (upgraded by the caller)
// and the current one.
func checkSchema(v []byte) error {
	if v == nil {
		return nil
	}
	if len(v) != 8 || binary.BigEndian.Uint64(v) < 1 || binary.BigEndian.Uint64(v) > schemaVersion {
		return fmt.Errorf("unsupported schema %x (this version reads 1 to %d)", v, schemaVersion)
	}
	return nil
}

func be64(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

// Path is the state file's path.
func (s *Bolt) Path() string { return s.path }

// StoreID is the id created with the file.
func (s *Bolt) StoreID() uint64 { return s.id }

// Stats reports group-commit counters.
func (s *Bolt) Stats() BoltStats {
	s.stats.Lock()
	defer s.stats.Unlock()
	return s.stats.BoltStats
}

// Close waits for every accepted Commit to finish, then closes the file.
// Later Commits fail with ErrClosed. Close is idempotent.
func (s *Bolt) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	return s.db.Close()
}
