package hostconn

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Every libvirt call the backend makes on a host goes through bounded
// (the wrappers in boundconn.go): it runs on a goroutine of its own and the
// caller waits at most the host's bound (--libvirt-call-timeout, plus the
// call's own budget for an agent command or a migration). A call past it
// returns a *CallTimeoutError, a transient error naming the host and the call, so
// the machine's call gate is released and the transition retries or ends
// at its deadline. A cgo call cannot be interrupted: the abandoned one
// keeps its goroutine (and OS thread) until libvirt returns, which the
// keepalive, or the socket timeouts set on the connection (sockopt.go),
// make happen once the link is dead. Each host admits at most
// MaxCallsPerHost calls inside libvirt at once, abandoned ones included,
// so a host that never answers holds a bounded number of threads.

// MaxCallsPerHost bounds the calls one host has inside libvirt at once.
const MaxCallsPerHost = 64

// slowCall: a call that took longer ends its thread (see bounded).
const slowCall = time.Second

// CallTimeoutError is a call that did not return within its bound.
type CallTimeoutError struct {
	where string // the host, as Host.Where names it
	call  string
	bound time.Duration
	Busy  bool // never started: the host's call slots were all taken
}

func (e *CallTimeoutError) Error() string {
	if e.Busy {
		return fmt.Sprintf("%s: libvirt %s not started within %s: %d calls to this host are still inside libvirt (--libvirt-call-timeout)",
			e.where, e.call, e.bound, MaxCallsPerHost)
	}
	return fmt.Sprintf("%s: libvirt %s did not return within %s (--libvirt-call-timeout)", e.where, e.call, e.bound)
}

// Unwrap: a call past its bound is a fault of the path to the host, and
// the engine retries it like one.
func (e *CallTimeoutError) Unwrap() error { return backend.ErrTransient }

// callSlots is one host's admission to libvirt.
type callSlots struct {
	slots     chan struct{}
	abandoned sync.WaitGroup // calls returned to nobody, still inside libvirt
}

func newCallSlots() *callSlots { return &callSlots{slots: make(chan struct{}, MaxCallsPerHost)} }

// bounded runs fn as one libvirt call on h within h's bound plus extra. A
// result that arrives after the caller gave up is released (discard).
func bounded[T any](h *Host, on held, call string, extra time.Duration, fn func() (T, error)) (T, error) {
	var zero T
	bound := h.cfg.CallTimeout + extra
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case h.calls.slots <- struct{}{}:
	case <-timer.C:
		return zero, &CallTimeoutError{where: h.Where(), call: call, bound: bound, Busy: true}
	}
	// The call holds a reference of its own on the handle it runs on: a
	// caller that gives up releases its handle, which must not free it
	// under the call still inside libvirt.
	if err := on.Ref(); err != nil {
		<-h.calls.slots
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
		done      = make(chan result, 1)
	)
	go func() {
		// A slow call's thread ends with it: a goroutine that exits locked
		// to its thread takes the thread along. The runtime never ends an
		// idle thread, so without this every call stuck on a dead link
		// would leave one more thread behind for good once it returns;
		// with it the provider's thread count comes back to its baseline
		// after any fault. A quick call gives its thread back for reuse
		// (a new thread for every call tripled a reconcile pass's time).
		runtime.LockOSThread()
		t0 := time.Now()
		v, err := fn()
		if time.Since(t0) < slowCall {
			runtime.UnlockOSThread()
		} else {
			// While this call sat in libvirt the runtime may have
			// started a thread to run other goroutines in its place;
			// that one would stay idle for good. A goroutine that exits
			// locked ends the thread it runs on, and its processor
			// moves to an idle thread (a new one only if none is idle:
			// then nothing is lost), so the count comes back down.
			go runtime.LockOSThread()
		}
		unref(on)
		<-h.calls.slots
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			discard(v)
			h.calls.abandoned.Done()
			return
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done: // it returned while the timer fired
		return r.v, r.err
	default:
	}
	abandoned = true
	h.calls.abandoned.Add(1)
	h.log.Warn("libvirt call did not return within its bound; abandoned", "call", call, "bound", bound.String())
	return zero, &CallTimeoutError{where: h.Where(), call: call, bound: bound}
}

// do is bounded for calls that return only an error.
func do(h *Host, on held, call string, extra time.Duration, fn func() error) error {
	_, err := bounded(h, on, call, extra, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// held is a handle a call runs on (a Conn, Domain, Pool or Volume).
type held interface{ Ref() error }

// heldAll is several handles one call runs on (a migration uses the
// source's connection, the domain and the destination's connection): each
// gets a reference of its own for as long as the call runs.
type heldAll []held

func (hs heldAll) Ref() error {
	for i, h := range hs {
		if err := h.Ref(); err != nil {
			for _, done := range hs[:i] {
				unref(done)
			}
			return err
		}
	}
	return nil
}

// unref gives back the reference bounded took.
func unref(on held) {
	switch x := on.(type) {
	case heldAll:
		for _, h := range x {
			unref(h)
		}
	case interface{ Free() error }:
		_ = x.Free()
	case Conn:
		_, _ = x.Close()
	}
}

// discard frees a handle nobody will use: the result of an abandoned call.
func discard(v any) {
	switch x := v.(type) {
	case interface{ Free() error }:
		if x != nil {
			_ = x.Free()
		}
	case []Domain:
		for _, d := range x {
			_ = d.Free()
		}
	}
}

// Inflight is how many calls to the host are inside libvirt now,
// abandoned ones included (at most MaxCallsPerHost).
func (h *Host) Inflight() int { return len(h.calls.slots) }
