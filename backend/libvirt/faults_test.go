package libvirt

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// The fault injector wraps the REAL connection (the test driver) and makes
// chosen calls fail the way a daemon or a link does. Rules are matched by
// operation ("conn.LookupDomainByName", "dom.GetMetadata", "pool.X",
// "vol.X") and optionally by the name the call is about (the domain, pool
// or volume, or the looked-up name); each rule counts its own matching
// calls, so "the 3rd GetMetadata of domain d" is one rule.

type faultKind int

const (
	faultRPC      faultKind = iota // ERR_RPC: the call failed in transport
	faultInternal                  // ERR_INTERNAL_ERROR
	faultTimeout                   // ERR_OPERATION_TIMEOUT
	faultDrop                      // the link goes mid-call: this call fails, IsAlive says false, later calls fail, the close callback fires
	faultAfter                     // the call takes effect, then its reply is lost (ERR_RPC)
	faultBlock                     // the call blocks until the rule's release is closed, then runs
	faultGarbage                   // a string result (metadata, capabilities) comes back damaged
	faultError                     // the rule's own err
)

type fault struct {
	op      string
	name    string // "" = any
	nth     int    // the nth matching call (1-based); 0 = every matching call
	kind    faultKind
	err     error
	release chan struct{}

	seen, hits int
}

// faults is one injector: the real connection every dial shares (so a
// redial reaches the same host state, as reconnecting to a daemon does),
// the rules, and what the backend did.
type faults struct {
	t    testing.TB
	mu   sync.Mutex
	real map[string]*libvirt.Connect // by URI

	rules    []*fault
	dialErrs []error       // the next dials fail with these, in order
	dialGate chan struct{} // non-nil: dials wait until it is closed (a frozen daemon)
	dials    int
	conns    []*faultConn
	mutated  []string // "op name" of every call that changes the host
	caps     func(string) string
	agent    func(domain, cmd string) (string, error) // stands in for qemu-ga (the test driver has none)
	uploads  map[string]int                           // emulated uploads (the test driver has none): volume -> bytes
	emulateU bool
	// emulateM stands in for a migration (the test driver has none):
	// Migrate3 defines and starts DEST_XML on the destination and removes
	// the source's domain, as a successful one does; migrated records the
	// flags of each.
	emulateM bool
	migrated []libvirt.DomainMigrateFlags
	// volXML, if set, rewrites a volume's XML as read (the test driver
	// reports no timestamps: a golden image's identity is given here).
	volXML func(name, xml string) string
	// capsOf, if set, rewrites the capabilities of the host at uri as
	// read (the test driver lists no machine types); domXML a domain's
	// XML as read (the test driver's domains have no machine type).
	capsOf func(uri, caps string) string
	domXML func(name, xml string) string
}

func newFaults(t testing.TB) *faults {
	return &faults{t: t, uploads: map[string]int{}, real: map[string]*libvirt.Connect{}}
}

// newFaultBackend is newTestBackend with every connection wrapped.
func newFaultBackend(t testing.TB, mutate func(*Config), setup func(*faults)) (*Backend, *faults, *syncBuffer) {
	t.Helper()
	f := newFaults(t)
	if setup != nil {
		setup(f)
	}
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatalf("newBackend: %v", err)
	}
	awaitStarted(t, b)
	t.Cleanup(func() {
		_ = b.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.real {
			_, _ = c.Close()
		}
	})
	return b, f, logs
}

// add installs a rule and returns it (to read hits or release a block).
func (f *faults) add(r *fault) *fault {
	if r.kind == faultBlock && r.release == nil {
		r.release = make(chan struct{})
	}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return r
}

// clear removes every rule (the fault has passed).
func (f *faults) clear() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

func (f *faults) failDials(errs ...error) {
	f.mu.Lock()
	f.dialErrs = append(f.dialErrs, errs...)
	f.mu.Unlock()
}

func (f *faults) mutations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.mutated...)
}

// freezeDials makes dials hang, as connecting to a frozen daemon does,
// until the returned thaw is called.
func (f *faults) freezeDials() (thaw func()) {
	gate := make(chan struct{})
	f.mu.Lock()
	f.dialGate = gate
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.dialGate = nil
		f.mu.Unlock()
		close(gate)
	}
}

func (f *faults) dial(uri string) (virt.Conn, error) {
	f.mu.Lock()
	if gate := f.dialGate; gate != nil {
		f.mu.Unlock()
		<-gate
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	f.dials++
	if len(f.dialErrs) > 0 {
		err := f.dialErrs[0]
		f.dialErrs = f.dialErrs[1:]
		return nil, err
	}
	real := f.real[uri]
	if real == nil {
		c, err := libvirt.NewConnect(uri)
		if err != nil {
			return nil, err
		}
		real = c // the injector's own reference, closed at cleanup
		f.real[uri] = c
	}
	if err := real.Ref(); err != nil {
		return nil, err
	}
	fc := &faultConn{uri: uri, inner: virt.Wrap(real), f: f}
	fc.refs.Store(1) // the dial's
	f.conns = append(f.conns, fc)
	return fc, nil
}

// match finds the rule that fires for this call, counting it.
func (f *faults) match(op, name string) *fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.op != op || (r.name != "" && r.name != name) {
			continue
		}
		r.seen++
		if r.nth == 0 || r.seen == r.nth {
			r.hits++
			return r
		}
	}
	return nil
}

func (f *faults) hits(r *fault) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.hits
}

func (f *faults) noteMutation(op, name string) {
	f.mu.Lock()
	f.mutated = append(f.mutated, op+" "+name)
	f.mu.Unlock()
}

func injected(code libvirt.ErrorNumber, op, what string) error {
	return libvirt.Error{Code: code, Domain: libvirt.FROM_RPC, Level: libvirt.ERR_ERROR,
		Message: fmt.Sprintf("injected %s: %s", what, op)}
}

// errClosed is what every call on a dropped connection gets, as from
// libvirt's client once its socket is gone.
var errClosed = libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR, Domain: libvirt.FROM_RPC, Level: libvirt.ERR_ERROR,
	Message: "internal error: client socket is closed"}

// faultConn is one dialled connection.
type faultConn struct {
	uri   string
	inner virt.Conn
	f     *faults
	dead  atomic.Bool
	refs  atomic.Int32 // references held; a call needs one
	mu    sync.Mutex
	cb    func(libvirt.ConnectCloseReason)
}

// kill drops the link: IsAlive turns false and the close callback fires
// from another goroutine, as libvirt's event loop would.
func (c *faultConn) kill() {
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

// do runs call under the rule (if any) that fires for op on name.
func (c *faultConn) do(op, name string, call func() error) error {
	if c.refs.Load() <= 0 {
		c.f.t.Errorf("%s on a connection whose last reference is closed", op)
	}
	if c.dead.Load() {
		return errClosed
	}
	r := c.f.match(op, name)
	if r == nil {
		return call()
	}
	switch r.kind {
	case faultRPC:
		return injected(libvirt.ERR_RPC, op, "rpc failure")
	case faultInternal:
		return injected(libvirt.ERR_INTERNAL_ERROR, op, "internal error")
	case faultTimeout:
		return injected(libvirt.ERR_OPERATION_TIMEOUT, op, "timeout")
	case faultDrop:
		c.kill()
		return injected(libvirt.ERR_SYSTEM_ERROR, op, "connection drop (End of file while reading data)")
	case faultAfter:
		if err := call(); err != nil {
			return err
		}
		return injected(libvirt.ERR_RPC, op, "lost reply")
	case faultBlock:
		<-r.release
		return call()
	case faultError:
		return r.err
	case faultGarbage:
		if err := call(); err != nil {
			return err
		}
		return errGarbage
	}
	panic("unknown fault kind")
}

// errGarbage tells str to replace a good result with a damaged one.
var errGarbage = fmt.Errorf("garbage")

// str is do for calls with a string result; faultGarbage damages it.
func (c *faultConn) str(op, name string, call func() (string, error)) (string, error) {
	var s string
	err := c.do(op, name, func() (err error) { s, err = call(); return err })
	if err == errGarbage {
		return `<instance xmlns="` + meta.NS + `"><provider>` + "\x00\x01 damaged", nil
	}
	return s, err
}

func xmlName(op, x string) string {
	if op == "conn.DomainDefineXML" || op == "conn.DomainCreateXML" {
		var d libvirtxml.Domain
		_ = d.Unmarshal(x)
		return d.Name
	}
	var v libvirtxml.StorageVolume
	_ = v.Unmarshal(x)
	return v.Name
}
