package store

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// openLocked opens the bbolt file at path holding its exclusive lock,
// waiting at most timeout for another process to release it.
//
// Compact replaces a file by renaming a new one over it while holding the
// old one's lock. A process that was waiting for that lock would then hold
// the lock of a file no longer at path, and every write it made would be
// lost with the old inode. So once locked, the open file must still be
// the one at path; if it is not, it is closed and path opened again.
func openLocked(path string, timeout time.Duration) (*bolt.DB, error) {
	deadline := time.Now().Add(timeout)
	for {
		var opened *os.File
		db, err := bolt.Open(path, 0o600, &bolt.Options{
			Timeout: max(time.Until(deadline), time.Millisecond),
			// Not persisting the freelist keeps each commit's page writes
			// proportional to the batch: with it, every transaction rewrites
			// the whole freelist, which grows with the file (an O(fleet) cost
			// per fsync). The price is a freelist rebuild by scanning the file
			// at open, once per process start, which is cheap at our sizes.
			NoFreelistSync: true,
			// The hashmap freelist allocates in ~O(1) where the array one scans;
			// it is the recommended pairing with NoFreelistSync.
			FreelistType: bolt.FreelistMapType,
			// NoSync stays false: Commit's promise is durability.
			OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				f, err := os.OpenFile(name, flag, perm)
				opened = f
				return f, err
			},
		})
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process (waited %s): %w", path, timeout, err)
		}
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		same, err := stillAt(opened, path)
		if same {
			return db, nil
		}
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("store: %s was replaced while waiting for its lock (waited %s): %w", path, timeout, bolt.ErrTimeout)
		}
	}
}

// stillAt reports whether f is the file currently at path.
func stillAt(f *os.File, path string) (bool, error) {
	open, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // renamed away: open it again
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(open, now), nil
}
