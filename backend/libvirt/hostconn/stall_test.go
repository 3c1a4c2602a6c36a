package hostconn

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// stallDialer dials the test driver and wraps each connection so a test
// can make chosen calls hang (a daemon that stopped answering), drop the
// link (IsAlive false, the close callback fires, as libvirt's event loop
// does) and hold dials (a daemon that accepts nothing). It is the small
// part of backend/libvirt's fault injector the host's own tests need.
type stallDialer struct {
	t     testing.TB
	mu    sync.Mutex
	gates map[string]chan struct{} // op -> closed when the calls may run
	hits  map[string]int           // op -> calls that entered while stalled
	dials int
	conns []*stallConn
	hold  chan struct{} // non-nil: dials wait until it is closed
}

func newStallDialer(t testing.TB) *stallDialer {
	return &stallDialer{t: t, gates: map[string]chan struct{}{}, hits: map[string]int{}}
}

// stall makes every call of op ("NumOfDomains", "GetLibVersion",
// "LookupDomainByName") hang until the returned release is called.
func (d *stallDialer) stall(op string) (release func()) {
	g := make(chan struct{})
	d.mu.Lock()
	d.gates[op] = g
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			if d.gates[op] == g {
				delete(d.gates, op)
			}
			d.mu.Unlock()
			close(g)
		})
	}
}

func (d *stallDialer) hitsOf(op string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits[op]
}

func (d *stallDialer) dialCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// holdDials makes dials wait until the returned function is called.
func (d *stallDialer) holdDials() (let func()) {
	g := make(chan struct{})
	d.mu.Lock()
	d.hold = g
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		d.hold = nil
		d.mu.Unlock()
		close(g)
	}
}

func (d *stallDialer) dial(uri string) (virt.Conn, error) {
	d.mu.Lock()
	hold := d.hold
	d.mu.Unlock()
	if hold != nil {
		<-hold
	}
	c, err := virt.Dial(uri)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	sc := &stallConn{Conn: c, d: d}
	sc.refs.Store(1) // the dial's
	d.conns = append(d.conns, sc)
	return sc, nil
}

// last is the newest connection.
func (d *stallDialer) last() *stallConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[len(d.conns)-1]
}

// wait runs before op: it hangs while op is stalled.
func (d *stallDialer) wait(op string) {
	d.mu.Lock()
	g := d.gates[op]
	if g != nil {
		d.hits[op]++
	}
	d.mu.Unlock()
	if g != nil {
		<-g
	}
}

var errClosed = libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR, Domain: libvirt.FROM_RPC, Level: libvirt.ERR_ERROR,
	Message: "internal error: client socket is closed"}

type stallConn struct {
	virt.Conn
	d    *stallDialer
	dead atomic.Bool
	refs atomic.Int32 // references held; a call needs one
	mu   sync.Mutex
	cb   func(libvirt.ConnectCloseReason)
}

// Ref and Close count the host's references; the real connection closes
// with the last one, and a call after that fails the test (and never
// reaches the closed handle).
func (c *stallConn) Ref() error {
	c.refs.Add(1)
	return nil
}

func (c *stallConn) Close() (int, error) {
	n := c.refs.Add(-1)
	switch {
	case n == 0:
		return c.Conn.Close()
	case n < 0:
		c.d.t.Errorf("a connection closed beyond its references (%d)", n)
	}
	return int(n), nil
}

// enter is every wrapped call's check: a reference is held, the link is
// up, and op is not stalled (else it waits).
func (c *stallConn) enter(op string) error {
	if c.refs.Load() <= 0 {
		c.d.t.Errorf("%s on a connection whose last reference is closed", op)
		return errClosed
	}
	c.d.wait(op)
	if c.dead.Load() {
		return errClosed
	}
	return nil
}

// kill drops the link: IsAlive turns false and the close callback fires
// from another goroutine.
func (c *stallConn) kill() {
	if c.dead.Swap(true) {
		return
	}
	c.mu.Lock()
	cb := c.cb
	c.mu.Unlock()
	if cb != nil {
		go cb(libvirt.CONNECT_CLOSE_REASON_EOF)
	}
}

func (c *stallConn) RegisterCloseCallback(cb func(libvirt.ConnectCloseReason)) error {
	c.mu.Lock()
	c.cb = cb
	c.mu.Unlock()
	return nil
}

func (c *stallConn) UnregisterCloseCallback() error {
	c.mu.Lock()
	c.cb = nil
	c.mu.Unlock()
	return nil
}

func (c *stallConn) IsAlive() (bool, error) {
	if c.dead.Load() {
		return false, nil
	}
	return c.Conn.IsAlive()
}

func (c *stallConn) NumOfDomains() (int, error) {
	if err := c.enter("NumOfDomains"); err != nil {
		return 0, err
	}
	return c.Conn.NumOfDomains()
}

func (c *stallConn) GetLibVersion() (uint32, error) {
	if err := c.enter("GetLibVersion"); err != nil {
		return 0, err
	}
	return c.Conn.GetLibVersion()
}

func (c *stallConn) GetCapabilities() (string, error) {
	if err := c.enter("GetCapabilities"); err != nil {
		return "", err
	}
	return c.Conn.GetCapabilities()
}

func (c *stallConn) LookupDomainByName(name string) (virt.Domain, error) {
	if err := c.enter("LookupDomainByName"); err != nil {
		return nil, err
	}
	return c.Conn.LookupDomainByName(name)
}

// stallHost is a host on the test driver behind a stallDialer, logging
// JSON into the returned buffer.
func stallHost(t *testing.T, mutate func(*Config)) (*Host, *stallDialer, *lockedBuffer) {
	t.Helper()
	StartEventLoop(slog.Default())
	d := newStallDialer(t)
	logs := &lockedBuffer{}
	cfg := Config{Zone: "z1", Name: "z1", URI: nodeURI(t), Dial: d.dial, Pool: "bigfleet", ProbeName: "bf-test-kvm-probe",
		CallTimeout: 30 * time.Second, AgentTimeout: time.Second, MigrateTimeout: time.Minute,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, KeepAliveSecs: 5, KeepAliveCount: 3,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mutate != nil {
		mutate(&cfg)
	}
	h := New(cfg)
	h.Start()
	t.Cleanup(h.Close)
	waitFor(t, 10*time.Second, func() bool { return h.Ready() == nil })
	return h, d, logs
}

// fillSlots runs n calls of NumOfDomains on h at once (stalled, so each
// is abandoned at its bound) and returns how many were refused as busy.
func fillSlots(t *testing.T, h *Host, n int) (busy int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.With(func(c virt.Conn) error { _, err := c.NumOfDomains(); return err })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var ct *CallTimeoutError
		if !errors.As(err, &ct) {
			t.Fatalf("call on a stuck host: %v, want a call timeout", err)
		}
		if ct.Busy {
			busy++
		}
	}
	return busy
}

// reconnect kills the host's current connection and waits for the next.
func reconnect(t *testing.T, h *Host, d *stallDialer) {
	t.Helper()
	dials := d.dialCount()
	d.last().kill()
	waitFor(t, 5*time.Second, func() bool { return d.dialCount() > dials && h.Ready() == nil })
}

// Call slots belong to a connection: calls abandoned on a dead link keep
// that link's slots, and the reconnected host takes new calls at once
// (issue 31, case 4). Across reconnects the host's threads stay bounded by
// MaxThreadsPerHost, and every one is counted until libvirt returns it.
func TestReconnectGetsFreshCallSlots(t *testing.T) {
	t.Parallel()
	h, d, logs := stallHost(t, func(c *Config) { c.CallTimeout = 300 * time.Millisecond })
	release := d.stall("NumOfDomains")
	defer release()
	if busy := fillSlots(t, h, MaxCallsPerHost); busy != 0 {
		t.Fatalf("%d of %d calls refused on a fresh connection", busy, MaxCallsPerHost)
	}
	if busy := fillSlots(t, h, 1); busy != 1 {
		t.Fatalf("a call past the connection's %d slots was not refused", MaxCallsPerHost)
	}
	reconnect(t, h, d)
	if err := h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err }); err != nil {
		t.Fatalf("first call after a reconnect, with %d calls stuck on the old connection: %v", MaxCallsPerHost, err)
	}
	if !strings.Contains(logs.String(), `"calls_inside":64`) {
		t.Errorf("the loss of a connection with calls inside does not say how many:\n%s", logs)
	}
	// Each reconnect strands at most a connection's slots; the host's
	// cap holds the sum.
	for i := range MaxThreadsPerHost/MaxCallsPerHost - 1 {
		if i > 0 {
			reconnect(t, h, d)
		}
		if busy := fillSlots(t, h, MaxCallsPerHost); busy != 0 {
			t.Fatalf("%d calls refused on a fresh connection under the host's cap", busy)
		}
	}
	if got := h.Inflight(); got != MaxThreadsPerHost || h.Abandoned() != MaxThreadsPerHost {
		t.Fatalf("inflight %d, abandoned %d; want both %d", got, h.Abandoned(), MaxThreadsPerHost)
	}
	if got := d.hitsOf("NumOfDomains"); got > MaxThreadsPerHost {
		t.Errorf("%d calls entered libvirt, want at most %d", got, MaxThreadsPerHost)
	}
	release()
	waitFor(t, 5*time.Second, func() bool { return h.Inflight() == 0 && h.Abandoned() == 0 })
}

// The watchdog's ping is a bounded call like any other: one at most in
// flight per connection, counted among the host's threads, so a daemon
// that accepts connections but never answers them does not pile up
// pinging goroutines (issue 31, case 4).
func TestWatchdogPingIsBounded(t *testing.T) {
	t.Parallel()
	h, d, _ := stallHost(t, func(c *Config) { c.KeepAliveSecs, c.KeepAliveCount = 1, 1 })
	release := d.stall("GetLibVersion")
	defer release()
	dials := d.dialCount()
	// Each silent ping ends its connection; the host re-dials and pings
	// the new one.
	waitFor(t, 10*time.Second, func() bool { return d.hitsOf("GetLibVersion") >= 3 })
	conns := d.dialCount() - dials + 1
	pings := d.hitsOf("GetLibVersion")
	if pings > conns {
		t.Errorf("%d pings inside libvirt over %d connections: more than one per connection", pings, conns)
	}
	if got := h.Inflight(); got < pings {
		t.Errorf("%d pings stuck inside libvirt, the host counts %d threads", pings, got)
	}
	release()
	waitFor(t, 5*time.Second, func() bool { return h.Inflight() == 0 && h.Ready() == nil })
}

// A daemon that stops answering (frozen) is declared dead by the watchdog
// within KeepAliveSecs*KeepAliveCount: the host turns Unavailable, a call
// still waiting on the old connection is not cut off (no handle is closed
// under it), and the host is back once the daemon answers again.
func TestWatchdogMarksSilentHostDown(t *testing.T) {
	t.Parallel()
	h, d, logs := stallHost(t, func(c *Config) { c.KeepAliveSecs, c.KeepAliveCount = 1, 1 })
	let := d.holdDials()
	freeze := d.stall("GetLibVersion")
	stuck := d.stall("LookupDomainByName")
	inFlight := make(chan error, 1)
	go func() {
		inFlight <- h.WithDomain("bf-frozen", func(virt.Conn, virt.Domain) error { return nil })
	}()
	waitFor(t, 5*time.Second, func() bool { return h.Ready() != nil })
	err := h.Ready()
	if !strings.Contains(err.Error(), "did not answer for 1s") || !errors.Is(err, backend.ErrHostUnavailable) {
		t.Fatalf("host error %v: want Unavailable naming the silence", err)
	}
	if !strings.Contains(logs.String(), "did not answer") {
		t.Errorf("no WARN for the dead link in the logs:\n%s", logs)
	}
	let()
	freeze()
	stuck()
	select {
	case err := <-inFlight:
		// The lookup ran on the old connection, still open under it: the
		// test driver's answer (no such domain), not a closed socket.
		if !virt.IsCode(err, libvirt.ERR_NO_DOMAIN) {
			t.Errorf("the call in flight during the freeze: %v, want the daemon's no-domain answer", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight never returned")
	}
	waitFor(t, 5*time.Second, func() bool { return h.Ready() == nil })
}

// Connections lost while many calls run on them: every call gets a result
// or an error, none runs on a connection whose last reference is closed
// (stallConn counts them and fails the test), and the host ends up
// connected. Run with -race: the reference counting is the point.
func TestReconnectUnderConcurrentCalls(t *testing.T) {
	h, d, _ := stallHost(t, nil)
	var stop atomic.Bool
	var calls, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var err error
				switch i % 3 {
				case 0:
					err = h.WithDomain("bf-stress", func(virt.Conn, virt.Domain) error { return nil })
					if virt.IsCode(err, libvirt.ERR_NO_DOMAIN) {
						err = nil // the daemon's answer: there is none
					}
				case 1:
					err = h.With(func(c virt.Conn) error { _, err := c.NumOfDomains(); return err })
				case 2:
					err = h.With(func(c virt.Conn) error { _, err := c.GetCapabilities(); return err })
				}
				calls.Add(1)
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	drops := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); drops++ {
		d.last().kill()
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	waitFor(t, 5*time.Second, func() bool { return h.Ready() == nil })
	dials := d.dialCount()
	t.Logf("%d drops, %d dials, %d calls, %d failed", drops, dials, calls.Load(), errs.Load())
	if dials < 5 || calls.Load() < 100 {
		t.Fatalf("the stress did not stress: %d dials, %d calls", dials, calls.Load())
	}
	if errs.Load() == 0 {
		t.Errorf("no call saw a dropped connection: the drops did not land under calls")
	}
}
