package leader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Quiet keeps a leader whose renewal is late from starting what could
// still run when its lease expires. The renew deadline's watchdog stops
// everything, but a libvirt call it abandons may still be carried out by
// libvirtd after its bound, and a live migration's call runs its phases
// across two hosts, which an abort reaches only between them: aborted at
// the deadline, a migration's destination was measured starting its
// incoming guest 1.2 s past the lease's expiry. So the leader goes quiet
// earlier, the moment its last renewal is older than lease − renew (the
// margin, MoveAge): no call that changes a host starts (MayChange), no
// migration starts, and every one running is aborted (Hold). What was
// started before has the whole renew deadline to end before the lease can
// expire. A renewal ends the quiet (docs/ha.md, "Quiet").
//
// Until this process first leads, nothing is held back (a standby changes
// no host, but its connection probe may start a transient guest); no
// migration may hold it.
type Quiet struct {
	// quiet is the renewal age past which this process, having led, is
	// quiet now, and 0 while it is not: MayChange is asked before every
	// libvirt call, so it reads this alone, without the lock.
	quiet atomic.Int64
	mu    sync.Mutex
	led   bool // this process has led: from now on a stale look is quiet
	fresh bool // it leads, and its last renewal is younger than age
	age   time.Duration
	next  uint64
	held  map[uint64]context.CancelCauseFunc
}

// NewQuiet is a quiet with no hold, before any look.
func NewQuiet() *Quiet { return &Quiet{held: map[uint64]context.CancelCauseFunc{}} }

// ErrRenewalLate is why a change is held back or a migration aborted.
type ErrRenewalLate struct{ Age time.Duration }

func (e ErrRenewalLate) Error() string {
	return fmt.Sprintf("the leader's last lease renewal is older than %s (--leader-elect-lease − --leader-elect-renew): no change to a host starts and live migrations are aborted until it renews, so that libvirt's work ends before the lease can expire", e.Age)
}

// MayChange says whether a call that changes a host may start now: an
// error once this process has led and its renewal is late.
func (q *Quiet) MayChange() error {
	if age := q.quiet.Load(); age != 0 {
		return ErrRenewalLate{time.Duration(age)}
	}
	return nil
}

// Hold returns a context for one live migration, ended (with
// ErrRenewalLate as its cause) once the renewal is late; release ends the
// hold. It refuses when the renewal is late already, or this process does
// not lead.
func (q *Quiet) Hold(parent context.Context) (ctx context.Context, release func(), err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.fresh {
		return nil, nil, ErrRenewalLate{q.age}
	}
	ctx, cancel := context.WithCancelCause(parent)
	id := q.next
	q.next++
	q.held[id] = cancel
	return ctx, func() {
		q.mu.Lock()
		delete(q.held, id)
		q.mu.Unlock()
		cancel(context.Canceled)
	}, nil
}

// Held is how many migrations hold the lease now.
func (q *Quiet) Held() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.held)
}

// observe records a look: whether this process leads and, if so, whether
// its last renewal is younger than age. Quiet from a stale look on, every
// held migration is aborted.
func (q *Quiet) observe(leading, fresh bool, age time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.led = q.led || leading
	q.fresh, q.age = leading && fresh, age
	if q.fresh || !q.led {
		q.quiet.Store(0)
	} else {
		q.quiet.Store(int64(max(age, 1))) // never 0: that means not quiet
	}
	if q.fresh {
		return
	}
	for id, cancel := range q.held {
		cancel(ErrRenewalLate{age})
		delete(q.held, id)
	}
}

// MoveAge is the renewal age from which the leader is quiet: the margin
// between the renew deadline and the lease.
func (c Config) MoveAge() time.Duration { return c.Lease - c.Renew }
