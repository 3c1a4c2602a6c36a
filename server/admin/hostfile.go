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

// hostRecord is one host write made through the admin API that must
// outlive the process: a cordon, or a down declaration.
type hostRecord struct {
	Host   string    `json:"host"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
}

// hostFileV1 is the files' format: small, human-readable, versioned. A
// cordon file holds "cordons", a down file "down"; the other list is
// absent (a nil pointer), an empty one is written as [].
type hostFileV1 struct {
	Version int           `json:"version"`
	Cordons *[]hostRecord `json:"cordons,omitempty"`
	Down    *[]hostRecord `json:"down,omitempty"`
}

const hostFileVersion = 1

// fileKind says which of the two files a store keeps.
type fileKind struct {
	name   string // in errors: "cordon file …"
	shared string // its Options.HostJournal kind
	list   func(*hostFileV1) **[]hostRecord
}

var (
	cordonFile = fileKind{"cordon", HostFileCordons, func(f *hostFileV1) **[]hostRecord { return &f.Cordons }}
	downFile   = fileKind{"down", HostFileDowns, func(f *hostFileV1) **[]hostRecord { return &f.Down }}
)

// The kinds Options.HostJournal is called with.
const (
	HostFileCordons = "cordons"
	HostFileDowns   = "down"
)

// hostStore holds one kind of host record, persisted in one small JSON
// file replaced atomically (write, fsync, rename, fsync the directory),
// so a crash leaves the old file or the new one, never a torn one.
// Without a path the records live in memory and a restart forgets them.
// mu also serialises the writes of its kind, so the file and the backend
// change in the same order.
type hostStore struct {
	path string
	kind fileKind

	// journal, if set, shares each new file before it is written
	// (Options.HostJournal).
	journal func(kind string, file []byte) error

	mu     sync.Mutex
	byHost map[string]hostRecord
}

// loadHostFile reads path; a missing file is no records, a file that
// cannot be read or parsed is an error (starting without the cordons an
// operator set could place machines on a host under maintenance; without
// the down declarations, wait on or call a host that is fenced).
func loadHostFile(path string, kind fileKind) (*hostStore, error) {
	c := &hostStore{path: path, kind: kind, byHost: map[string]hostRecord{}}
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
	if c.byHost, err = parseHostFile(data, kind); err != nil {
		return nil, fmt.Errorf("%s file %s: %w", kind.name, path, err)
	}
	return c, nil
}

// parseHostFile reads one file's records; empty data is none.
func parseHostFile(data []byte, kind fileKind) (map[string]hostRecord, error) {
	out := map[string]hostRecord{}
	if len(data) == 0 {
		return out, nil
	}
	var f hostFileV1
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Version != hostFileVersion {
		return nil, fmt.Errorf("version %d, this provider reads version %d", f.Version, hostFileVersion)
	}
	if recs := *kind.list(&f); recs != nil {
		for _, r := range *recs {
			if r.Host == "" {
				return nil, errors.New("an entry without a host")
			}
			out[r.Host] = r
		}
	}
	return out, nil
}

func (c *hostStore) snapshot() map[string]hostRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byHost)
}

// setLocked makes next the record set (c.mu held): shared with the
// other replicas first (a refusal there changes nothing), then on disk.
func (c *hostStore) setLocked(next map[string]hostRecord) error {
	data, err := encodeHostFile(c.kind, next)
	if err != nil {
		return err
	}
	if c.journal != nil {
		if err := c.journal(c.kind.shared, data); err != nil {
			return fmt.Errorf("sharing it with the other replicas failed: %w", err)
		}
	}
	if c.path != "" {
		if err := writeHostFile(c.path, data); err != nil {
			return err
		}
	}
	c.byHost = next
	return nil
}

func encodeHostFile(kind fileKind, byHost map[string]hostRecord) ([]byte, error) {
	recs := []hostRecord{}
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		recs = append(recs, byHost[h])
	}
	f := hostFileV1{Version: hostFileVersion}
	*kind.list(&f) = &recs
	return json.MarshalIndent(f, "", "  ")
}

func writeHostFile(path string, data []byte) error {
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
