package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compaction is offline: the provider must be stopped. bbolt never gives
// pages back to the file system, and a file written by older versions
// holds JSON records and half-empty pages; Compact writes everything into
// a new file, full pages and every record in the current format, then
// renames it over the old one. It is not done at startup: it reads and
// writes the whole fleet (seconds at 100k, against a boot budget of one),
// and a file in the current format stays small by itself (bbolt reuses the
// pages it frees), so it pays only once, after an upgrade, or after a
// fleet shrank a lot.
//
// Crash safety: the old file is not touched until the rename, which is
// atomic; the new one is fsynced before it. A crash leaves either the old
// file (plus a stray path+".compact", removed by the next run) or the new
// one, both complete. The old file's lock is held throughout, so a
// provider cannot start on it meanwhile (and OpenBolt re-opens a file
// that was renamed over while it waited for the lock; see openLocked).

// CompactOptions tunes Compact. The zero value is a good default.
type CompactOptions struct {
	// LockTimeout bounds the wait for the file's lock (default 1s): a
	// running provider holds it, and Compact then fails.
	LockTimeout time.Duration
	// Progress, if set, is called after each transaction of the copy with
	// the number of machine records written so far.
	Progress func(machines int)
	// chunk is the records per transaction (tests make it small).
	chunk int
}

// CompactResult says what Compact did.
type CompactResult struct {
	Machines, Marks, Offerings int
	// Before and After are the file's sizes in bytes.
	Before, After int64
}

// compactChunk is the number of records per transaction of the copy:
// bounded memory, few fsyncs (the copy runs with NoSync and one fsync at
// the end anyway).
const compactChunk = 20_000

// Compact rewrites the state file at path (see above).
func Compact(path string, opts CompactOptions) (CompactResult, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.chunk <= 0 {
		opts.chunk = compactChunk
	}
	var res CompactResult
	if _, err := os.Stat(path); err != nil { // bolt.Open would create it
		return res, fmt.Errorf("store: compact: %w", err)
	}
	src, err := openLocked(path, opts.LockTimeout)
	if err != nil {
		return res, err
	}
	defer src.Close() // after the rename: the lock is held until then
	if res.Before, err = sizeOf(path); err != nil {
		return res, err
	}
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return res, fmt.Errorf("store: compact %s: remove leftover %s: %w", path, tmp, err)
	}
	if err := compactInto(src, tmp, opts, &res); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("store: compact %s: %w", path, err)
	}
	res.After, err = sizeOf(path)
	return res, err
}

// compactInto copies src into a new file at tmp and fsyncs it.
func compactInto(src *bolt.DB, tmp string, opts CompactOptions, res *CompactResult) error {
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true,
		FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = src.View(func(stx *bolt.Tx) error { return copyState(stx, dst, opts, res) })
	if err == nil {
		err = dst.Sync() // NoSync skipped the per-transaction fsyncs
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

func copyState(stx *bolt.Tx, dst *bolt.DB, opts CompactOptions, res *CompactResult) error {
	meta := stx.Bucket(bucketMeta)
	if meta == nil || len(meta.Get(keyStoreID)) != 8 {
		return fmt.Errorf("not a state file (no store id)")
	}
	if err := checkSchema(meta.Get(keySchema)); err != nil {
		return err
	}
	err := stx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		for _, known := range [][]byte{bucketMeta, bucketMachines, bucketOfferings, bucketMarks} {
			if bytes.Equal(name, known) {
				return nil
			}
		}
		return fmt.Errorf("unknown bucket %q: refusing to drop it", name)
	})
	if err != nil {
		return err
	}
	err = dst.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMachines, bucketMarks, bucketOfferings} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		m, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := m.Put(keyStoreID, bytes.Clone(meta.Get(keyStoreID))); err != nil {
			return err
		}
		if err := putRebuilding(m, readRebuilding(meta)); err != nil {
			return err
		}
		return m.Put(keySchema, be64(schemaVersion))
	})
	if err != nil {
		return err
	}
	if err := copyMachines(stx, dst, opts, res); err != nil {
		return err
	}
	return copyMarks(stx, dst, opts.chunk, res)
}

// copyMachines re-encodes every record in the current format, with a
// fresh offerings table holding only the offerings still referred to.
func copyMachines(stx *bolt.Tx, dst *bolt.DB, opts CompactOptions, res *CompactResult) error {
	offerings, err := readOfferings(stx)
	if err != nil {
		return err
	}
	lookup := func(id uint64) (*offering, bool) {
		o, ok := offerings[id]
		return o, ok
	}
	table := newOfferingTable()
	c := stx.Bucket(bucketMachines).Cursor()
	k, v := c.First()
	for k != nil {
		var written []uint64
		err := dst.Update(func(tx *bolt.Tx) error {
			b, ob := tx.Bucket(bucketMachines), tx.Bucket(bucketOfferings)
			b.FillPercent, ob.FillPercent = 1, 1 // keys arrive in order: fill every page
			for n := 0; k != nil && n < opts.chunk; k, v = c.Next() {
				m, err := decodeMachine(k, v, lookup)
				if err != nil {
					return err
				}
				off, write := table.ref(encodeOffering(&m))
				if write && !slices.Contains(written, off) {
					e := table.entry(off)
					if err := ob.Put(e.k, e.v); err != nil {
						return err
					}
					written = append(written, off)
				}
				if err := b.Put(k, encodeRecord(&m, off)); err != nil {
					return putErr("machine", k, nil, err)
				}
				n++
				res.Machines++
			}
			return nil
		})
		if err != nil {
			return err
		}
		table.committed(written)
		res.Offerings += len(written)
		if opts.Progress != nil {
			opts.Progress(res.Machines)
		}
	}
	return nil
}

// copyMarks copies the fence marks as they are, checking each parses.
func copyMarks(stx *bolt.Tx, dst *bolt.DB, chunk int, res *CompactResult) error {
	c := stx.Bucket(bucketMarks).Cursor()
	k, v := c.First()
	for k != nil {
		err := dst.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketMarks)
			b.FillPercent = 1
			for n := 0; k != nil && n < chunk; k, v = c.Next() {
				if _, err := parseMarkKey(k); err != nil {
					return err
				}
				if _, err := parseMarkValue(v); err != nil {
					return err
				}
				if err := b.Put(k, v); err != nil {
					return putErr("fence mark", k, v, err)
				}
				n++
				res.Marks++
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func sizeOf(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	return fi.Size(), nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
