package store

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// The zones whose records were seeded without a listing of every host
// (record.Batch.Rebuilding) are keys of the meta bucket,
// "rebuilding/<zone>", so they survive restarts and compaction.

var prefixRebuilding = []byte("rebuilding/")

// applyRebuilding applies a batch's marks and clears to set.
func applyRebuilding(set, change map[string]bool) {
	for z, on := range change {
		if on {
			set[z] = true
		} else {
			delete(set, z)
		}
	}
}

// putRebuilding writes a batch's marks and clears into the meta bucket.
func putRebuilding(meta *bolt.Bucket, change map[string]bool) error {
	for z, on := range change {
		k := append(bytes.Clone(prefixRebuilding), z...)
		if !on {
			if err := meta.Delete(k); err != nil {
				return err
			}
			continue
		}
		if err := meta.Put(k, []byte{1}); err != nil {
			return err
		}
	}
	return nil
}

// readRebuilding returns the zones the meta bucket marks.
func readRebuilding(meta *bolt.Bucket) map[string]bool {
	out := map[string]bool{}
	c := meta.Cursor()
	for k, _ := c.Seek(prefixRebuilding); k != nil && bytes.HasPrefix(k, prefixRebuilding); k, _ = c.Next() {
		out[string(k[len(prefixRebuilding):])] = true
	}
	return out
}
