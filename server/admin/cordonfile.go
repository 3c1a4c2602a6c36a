package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// cordonRecord is one cordon made through the admin API.
type cordonRecord struct {
	Host   string    `json:"host"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
}

// cordonFileV1 is the file's format: small, human-readable, versioned.
type cordonFileV1 struct {
	Version int            `json:"version"`
	Cordons []cordonRecord `json:"cordons"`
}

const cordonFileVersion = 1

// cordonStore holds the cordons made through the admin API, persisted in
// one small JSON file replaced atomically (write, fsync, rename, fsync
// the directory), so a crash leaves the old file or the new one, never a
// torn one. Without a path the cordons live in memory and a restart
// forgets them. mu also serialises cordon writes, so the file and the
// backend change in the same order.
type cordonStore struct {
	path string

	mu     sync.Mutex
	byHost map[string]cordonRecord
}

// loadCordons reads path; a missing file is no cordons, a file that
// cannot be read or parsed is an error (starting without the cordons an
// operator set could place machines on a host under maintenance).
func loadCordons(path string) (*cordonStore, error) {
	c := &cordonStore{path: path, byHost: map[string]cordonRecord{}}
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	var f cordonFileV1
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("cordon file %s: %w", path, err)
	}
	if f.Version != cordonFileVersion {
		return nil, fmt.Errorf("cordon file %s: version %d, this provider reads version %d", path, f.Version, cordonFileVersion)
	}
	for _, r := range f.Cordons {
		if r.Host == "" {
			return nil, fmt.Errorf("cordon file %s: a cordon without a host", path)
		}
		c.byHost[r.Host] = r
	}
	return c, nil
}

func (c *cordonStore) snapshot() map[string]cordonRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byHost)
}

// setLocked makes next the cordon set, on disk first (c.mu held).
func (c *cordonStore) setLocked(next map[string]cordonRecord) error {
	if c.path != "" {
		if err := writeCordons(c.path, next); err != nil {
			return err
		}
	}
	c.byHost = next
	return nil
}

func writeCordons(path string, byHost map[string]cordonRecord) error {
	f := cordonFileV1{Version: cordonFileVersion, Cordons: []cordonRecord{}}
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		f.Cordons = append(f.Cordons, byHost[h])
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing to remove
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
