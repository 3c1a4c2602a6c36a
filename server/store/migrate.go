package store

import (
	"encoding/binary"
	"log/slog"
	"time"

	bolt "go.etcd.io/bbolt"
)

// migrateOnOpen compacts a schema 1 file the first time this version opens
// it. Such a file holds every record as JSON in half-empty pages (105 MB
// at 100k machines, against 6 MB compacted), and every start would pay
// for decoding that JSON (about 2 s of CPU at 100k) until each record
// happened to be rewritten. Compacting once costs about as much as one
// such start. It is the only case where compaction pays at startup; in the
// current format bbolt reuses the pages it frees, so the file does not
// grow with churn, and `libvirt compact-state` is there for the rest.
//
// db is closed for the compaction (which takes the lock itself) and path
// reopened. If compaction fails (a full disk, say), the file is used as it
// is, with a warning: its records still migrate as they are written.
func migrateOnOpen(db *bolt.DB, path string, opts BoltOptions) (*bolt.DB, error) {
	if opts.KeepFormat || !isSchema1(db) {
		return db, nil
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := Compact(path, CompactOptions{LockTimeout: opts.LockTimeout})
	if err != nil {
		log.Warn("state file not migrated to the compact format: using it as it is; its records migrate as they are written",
			slog.String("state", path), slog.Any("error", err))
	} else {
		log.Info("state file migrated to the compact format (once, on the first start of this version)",
			slog.String("state", path), slog.Int64("bytes_before", res.Before), slog.Int64("bytes_after", res.After),
			slog.Int("machines", res.Machines), slog.Int("marks", res.Marks),
			slog.String("took", time.Since(start).Round(time.Millisecond).String()))
	}
	return openLocked(path, opts.LockTimeout)
}

// isSchema1 reports whether db was written by a schema 1 version.
func isSchema1(db *bolt.DB) bool {
	schema1 := false
	_ = db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			v := meta.Get(keySchema)
			schema1 = len(v) == 8 && binary.BigEndian.Uint64(v) == 1
		}
		return nil
	})
	return schema1
}
