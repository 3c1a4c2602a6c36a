package hostconn

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
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
// make happen once the link is dead.
//
// Admission is per connection: each connection admits at most
// MaxCallsPerHost calls inside libvirt at once, abandoned ones included,
// so calls stuck on a dead link hold that link's slots, and a reconnect
// starts with fresh ones (a call on the old connection gives its slot back
// to the old one's). What bounds the threads across reconnects is the
// host's own cap: at most MaxThreadsPerHost calls (and watchdog pings)
// inside libvirt at once over all its connections, old and current; a
// call past it fails "busy" like one past its connection's slots. So a host
// that never answers holds at most MaxThreadsPerHost threads, however
// often it reconnects, and Inflight and Abandoned say how many it holds.

// MaxCallsPerHost bounds the calls one connection to a host has inside
// libvirt at once (the host's current connection: a reconnect gets fresh
// slots).
const MaxCallsPerHost = 64

// MaxThreadsPerHost bounds the calls one host has inside libvirt at once
// over all its connections, those abandoned on lost connections included:
// the threads a host can hold, whatever the number of reconnects.
const MaxThreadsPerHost = 4 * MaxCallsPerHost

// slowCall: a call that took longer ends its thread (see bounded).
const slowCall = time.Second

// CallTimeoutError is a call that did not return within its bound.
type CallTimeoutError struct {
	where string // the host, as Host.Where names it
	call  string
	bound time.Duration
	Busy  bool   // never started: the connection's (or the host's) call slots were all taken
	full  string // what was full, for Busy
}

func (e *CallTimeoutError) Error() string {
	if e.Busy {
		return fmt.Sprintf("%s: libvirt %s not started within %s: %s (--libvirt-call-timeout)",
			e.where, e.call, e.bound, e.full)
	}
	return fmt.Sprintf("%s: libvirt %s did not return within %s (--libvirt-call-timeout)", e.where, e.call, e.bound)
}

// Unwrap: a call past its bound is a fault of the path to the host, and
// the engine retries it like one.
func (e *CallTimeoutError) Unwrap() error { return backend.ErrTransient }

// callSlots is one connection's admission to libvirt: its call slots and
// the watchdog's one ping (watch.go).
type callSlots struct {
	slots chan struct{}
	ping  chan struct{}
}

func newCallSlots() *callSlots {
	return &callSlots{slots: make(chan struct{}, MaxCallsPerHost), ping: make(chan struct{}, 1)}
}

// hostThreads is one host's cap on calls inside libvirt over all its
// connections, and the count of those nobody waits for any more.
type hostThreads struct {
	slots     chan struct{}
	abandoned atomic.Int64 // calls returned to nobody, still inside libvirt
}

func newHostThreads() *hostThreads {
	return &hostThreads{slots: make(chan struct{}, MaxThreadsPerHost)}
}

// bounded runs fn as one libvirt call on h, admitted by cs (the
// connection's slots), within h's bound plus extra.
func bounded[T any](h *Host, cs *callSlots, on held, call string, extra time.Duration, fn func() (T, error)) (T, error) {
	return boundedIn(h, cs.slots, on, call, h.cfg.CallTimeout+extra, fn)
}

// boundedIn runs fn as one libvirt call on h within bound, admitted by a
// slot of lane (one connection's calls, or its ping) and one of the host's
// threads. A result that arrives after the caller gave up is released
// (discard); a successful one of a call that changes the host is reported
// (lateResult).
func boundedIn[T any](h *Host, lane chan struct{}, on held, call string, bound time.Duration, fn func() (T, error)) (T, error) {
	var zero T
	if err := h.mayStart(call); err != nil {
		return zero, err
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	busy := func(full string) (T, error) {
		return zero, &CallTimeoutError{where: h.Where(), call: call, bound: bound, Busy: true, full: full}
	}
	select {
	case lane <- struct{}{}:
	case <-timer.C:
		return busy(fmt.Sprintf("%d calls on this host's connection are still inside libvirt", cap(lane)))
	}
	select {
	case h.threads.slots <- struct{}{}:
	case <-timer.C:
		<-lane
		return busy(fmt.Sprintf("%d calls to this host are still inside libvirt over its connections, %d of them abandoned",
			MaxThreadsPerHost, h.threads.abandoned.Load()))
	}
	release := func() { <-h.threads.slots; <-lane }
	// The call holds a reference of its own on the handle it runs on: a
	// caller that gives up releases its handle, which must not free it
	// under the call still inside libvirt.
	if err := on.Ref(); err != nil {
		release()
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
		release()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			h.threads.abandoned.Add(-1)
			h.lateResult(call, err, time.Since(t0))
			discard(v)
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
	n := h.threads.abandoned.Add(1)
	h.log.Warn("libvirt call did not return within its bound; abandoned", "call", call, "bound", bound.String(),
		"abandoned_inside", n)
	return zero, &CallTimeoutError{where: h.Where(), call: call, bound: bound}
}

// do is bounded for calls that return only an error.
func do(h *Host, cs *callSlots, on held, call string, extra time.Duration, fn func() error) error {
	_, err := bounded(h, cs, on, call, extra, func() (struct{}, error) { return struct{}{}, fn() })
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
	case virt.Conn:
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
	case []virt.Domain:
		for _, d := range x {
			_ = d.Free()
		}
	}
}

// Inflight is how many calls (and watchdog pings) to the host are inside
// libvirt now, over all its connections, abandoned ones included (at most
// MaxThreadsPerHost): the threads the host holds.
func (h *Host) Inflight() int { return len(h.threads.slots) }

// Abandoned is how many of those nobody waits for any more: calls past
// their bound, most often on a connection that has since been lost.
func (h *Host) Abandoned() int { return int(h.threads.abandoned.Load()) }
