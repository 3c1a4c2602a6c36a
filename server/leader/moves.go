package leader

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Moves holds the work libvirt cannot stop at once: live migrations. A
// migration's call (virDomainMigrate3) runs its phases across two hosts,
// and an abort reaches it only between them: aborted early in the call,
// the destination's incoming guest is still started and then torn down,
// seconds later (measured on the lab: 1.8 s after the abort). A stop at
// the renew deadline, as every other call gets, leaves that unwinding
// past the lease's expiry. So a migration gets the margin at the front:
// it starts only while the last renewal is younger than the lease − the
// renew deadline, and is aborted the moment it is older, leaving the
// whole renew deadline for libvirt to unwind it before the lease can
// expire (docs/ha.md, "Live migrations").
//
// The zero value refuses every hold until watch says this process leads
// with a fresh renewal.
type Moves struct {
	mu    sync.Mutex
	fresh bool
	age   time.Duration // the abort age, for the cause
	next  uint64
	held  map[uint64]context.CancelCauseFunc
}

// NewMoves is an empty set of holds, refusing until the first fresh look.
func NewMoves() *Moves { return &Moves{held: map[uint64]context.CancelCauseFunc{}} }

// ErrRenewalLate is the cause of a migration refused or aborted because
// the lease's renewal is late.
type ErrRenewalLate struct{ Age time.Duration }

func (e ErrRenewalLate) Error() string {
	return fmt.Sprintf("the leader's last lease renewal is older than %s (--leader-elect-lease − --leader-elect-renew): a live migration is not started, and one running is aborted, so that libvirt unwinds it before the lease can expire", e.Age)
}

// Hold returns a context for one migration, ended (with ErrRenewalLate
// as its cause) once the renewal is late; release ends the hold. It
// refuses when the renewal is late already, or this process does not
// lead.
func (m *Moves) Hold(parent context.Context) (ctx context.Context, release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fresh {
		return nil, nil, ErrRenewalLate{m.age}
	}
	ctx, cancel := context.WithCancelCause(parent)
	id := m.next
	m.next++
	m.held[id] = cancel
	return ctx, func() {
		m.mu.Lock()
		delete(m.held, id)
		m.mu.Unlock()
		cancel(context.Canceled)
	}, nil
}

// Held is how many migrations hold the lease now.
func (m *Moves) Held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// observe records whether the last renewal is younger than age; when it
// is not, every held migration is aborted.
func (m *Moves) observe(fresh bool, age time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fresh, m.age = fresh, age
	if fresh {
		return
	}
	for id, cancel := range m.held {
		cancel(ErrRenewalLate{age})
		delete(m.held, id)
	}
}

// MoveAge is the renewal age past which migrations are aborted: the
// margin between the renew deadline and the lease.
func (c Config) MoveAge() time.Duration { return c.Lease - c.Renew }
