package admin

import "fmt"

// RestoreHostFiles makes the cordons and down declarations those of the
// given files (the shared journal's copies, docs/ha.md) and applies them
// through the backend: a new leader calls it before its engine starts,
// so its first pass already sees a host declared down as such. Empty
// data is no records. The local files are rewritten to match; nothing is
// shared back (the data came from there). Hosts are only ever added to
// the backend's cordons and declarations here: a standby starts with
// none of its own (its files are set aside at startup, like its state).
func (s *Service) RestoreHostFiles(cordons, downs []byte) error {
	for _, r := range []struct {
		store *hostStore
		data  []byte
	}{{s.cordons, cordons}, {s.downs, downs}} {
		recs, err := parseHostFile(r.data, r.store.kind)
		if err != nil {
			return fmt.Errorf("the shared %s file: %w", r.store.kind.name, err)
		}
		r.store.mu.Lock()
		if r.store.path != "" && len(r.data) > 0 {
			err = writeHostFile(r.store.path, r.data)
		}
		if err == nil {
			r.store.byHost = recs
		}
		r.store.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s file %s: %w", r.store.kind.name, r.store.path, err)
		}
	}
	if s.applyCordons()+s.applyDowns() > 0 {
		s.onCordon()
	}
	return nil
}
