package index

// watcher receives every published record. A slow watcher loses records
// rather than stalling the engine; Lost tells it to resynchronise.
type watcher struct {
	ch   chan Machine
	lost bool
}

// Watch subscribes to machine changes. The returned channel gets a copy of
// every record published from now on; cancel unsubscribes and closes it.
// lost reports whether the buffer overflowed and records were dropped.
func (ix *Index) Watch(buffer int) (ch <-chan Machine, lost func() bool, cancel func()) {
	w := &watcher{ch: make(chan Machine, buffer)}
	ix.mu.Lock()
	ix.watchers[w] = struct{}{}
	ix.mu.Unlock()
	lost = func() bool {
		ix.mu.RLock()
		defer ix.mu.RUnlock()
		return w.lost
	}
	cancel = func() {
		ix.mu.Lock()
		if _, ok := ix.watchers[w]; ok {
			delete(ix.watchers, w)
			close(w.ch)
		}
		ix.mu.Unlock()
	}
	return w.ch, lost, cancel
}

// notify runs under ix.mu (write-locked).
func (ix *Index) notify(m *Machine) {
	for w := range ix.watchers {
		select {
		case w.ch <- m.Clone():
		default:
			w.lost = true
		}
	}
}
