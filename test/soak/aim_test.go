//go:build soak

package soak

import (
	"fmt"
	"strings"
	"sync"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Some faults are aimed (issue 15): a libvirtd freeze lands during an
// in-flight Create every other time, a libvirtd kill during a Configure or
// a Drain two times in three. The fault waits for a machine in that state
// (polled through List) and fires the moment one is seen; if none shows
// within aimWait it fires anyway, and the miss is counted.
var aims = map[faultKind][]pb.MachineState{
	virtFreeze: {pb.MachineState_MACHINE_STATE_CREATING, pb.MachineState_MACHINE_STATE_UNSPECIFIED},
	virtKill: {pb.MachineState_MACHINE_STATE_CONFIGURING, pb.MachineState_MACHINE_STATE_DRAINING,
		pb.MachineState_MACHINE_STATE_UNSPECIFIED},
}

const aimWait = 90 * time.Second

// aimer counts, per aim, how often the fault landed on it.
type aimer struct {
	mu     sync.Mutex
	next   map[faultKind]int
	landed map[string][2]int // "libvirtd-freeze during CREATING" → {landed, tried}
}

func newAimer() *aimer {
	return &aimer{next: map[faultKind]int{}, landed: map[string][2]int{}}
}

// aim waits for the next target of kind k and returns a note for the
// fault ("" when k is not aimed this time).
func (s *soak) aim(k faultKind) string {
	a := s.aimer
	a.mu.Lock()
	targets := aims[k]
	if len(targets) == 0 {
		a.mu.Unlock()
		return ""
	}
	want := targets[a.next[k]%len(targets)]
	a.next[k]++
	a.mu.Unlock()
	if want == pb.MachineState_MACHINE_STATE_UNSPECIFIED {
		return ""
	}
	name := strings.TrimPrefix(want.String(), "MACHINE_STATE_")
	key := fmt.Sprintf("%s during %s", k, name)
	id := s.awaitAny(want, aimWait)
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.landed[key]
	c[1]++
	if id == "" {
		a.landed[key] = c
		return fmt.Sprintf("aimed at %s, none within %s", name, aimWait)
	}
	c[0]++
	a.landed[key] = c
	return fmt.Sprintf("during %s of %s", name, id)
}

// awaitAny returns a machine seen in state want within d, or "".
func (s *soak) awaitAny(want pb.MachineState, d time.Duration) string {
	for end := time.Now().Add(d); time.Now().Before(end) && !s.stop.Load(); {
		if ms, err := s.list(); err == nil {
			for id, m := range ms {
				if m.GetState() == want {
					return id
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ""
}

// aimReport lists every aim with how often it landed, and makes one that
// never landed a violation: the menu promised it.
func (s *soak) aimReport() {
	a := s.aimer
	a.mu.Lock()
	defer a.mu.Unlock()
	var parts []string
	for key, c := range a.landed {
		parts = append(parts, fmt.Sprintf("%s %d/%d", key, c[0], c[1]))
		if c[1] > 0 && c[0] == 0 {
			s.violate(clOther, "aim|"+key, fmt.Sprintf("no %s landed in %d tries", key, c[1]), nil)
		}
	}
	s.logf("aimed faults (landed/tried): %s", strings.Join(parts, ", "))
}
