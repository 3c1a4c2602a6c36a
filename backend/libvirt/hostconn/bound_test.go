package hostconn

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every connection admits MaxCallsPerHost calls; the host admits
// MaxThreadsPerHost over all of them, so calls stranded on connection
// after connection hold a bounded number of threads.
func TestHostCapsThreadsOverConnections(t *testing.T) {
	t.Parallel()
	h := New(Config{Zone: "z1", Name: "z1", URI: "test:///default", CallTimeout: 50 * time.Millisecond})
	release := make(chan struct{})
	var wg sync.WaitGroup
	conns := MaxThreadsPerHost / MaxCallsPerHost
	for range conns {
		cs := newCallSlots()
		for range MaxCallsPerHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = do(h, cs, &countedHandle{}, "Create d", 0, func() error { <-release; return nil })
			}()
		}
	}
	wg.Wait()
	if h.Inflight() != MaxThreadsPerHost || h.Abandoned() != MaxThreadsPerHost {
		t.Fatalf("inflight %d, abandoned %d; want %d", h.Inflight(), h.Abandoned(), MaxThreadsPerHost)
	}
	err := do(h, newCallSlots(), &countedHandle{}, "GetCapabilities", 0, func() error { return nil })
	var ct *CallTimeoutError
	if !errors.As(err, &ct) || !ct.Busy || !strings.Contains(err.Error(), "over its connections, 256 of them abandoned") {
		t.Fatalf("a call on a fresh connection past the host's cap: %v, want busy naming the cap", err)
	}
	close(release)
	waitFor(t, 2*time.Second, func() bool { return h.Inflight() == 0 && h.Abandoned() == 0 })
	if err := do(h, newCallSlots(), &countedHandle{}, "GetCapabilities", 0, func() error { return nil }); err != nil {
		t.Fatalf("a call once the stranded ones returned: %v", err)
	}
}
