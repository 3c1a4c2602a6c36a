package serial

import "sync"

// Keyed serialises work per machine id while letting different machines
// proceed in parallel. The map lock is held only to find or drop an entry,
// never across disk I/O.
type Keyed struct {
	mu sync.Mutex
	m  map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

// Lock locks key and returns its unlock function.
func (k *Keyed) Lock(key string) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*refMutex)
	}
	rm := k.m[key]
	if rm == nil {
		rm = &refMutex{}
		k.m[key] = rm
	}
	rm.refs++
	k.mu.Unlock()

	rm.Lock()
	return func() {
		rm.Unlock()
		k.mu.Lock()
		rm.refs--
		if rm.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
