package admin

import (
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// bootEvery is how often a watch looks for boot phases that changed
// without a new record (a restarted guest that finished booting).
const bootEvery = 2 * time.Second

// bootTrack is one watch's view of the boot phases it sent: a guest's boot
// status is the backend's runtime state, not part of the record, so its
// changes come with no revision. The machines last sent CREATING or IDLE
// are looked up again every bootEvery and re-sent (same revision) when
// their phase or reason changed.
type bootTrack struct {
	br   backend.BootReporter
	sent map[string]bootSent
}

type bootSent struct {
	m   record.Machine
	key string // phase and reason as sent
}

// newBootTrack is nil when the backend reports no boots (the fake).
func (s *Service) newBootTrack() *bootTrack {
	br, ok := s.eng.Backend().(backend.BootReporter)
	if !ok {
		return nil
	}
	return &bootTrack{br: br, sent: map[string]bootSent{}}
}

// ticker is the channel of the track's checks (nil: none, never fires).
func (b *bootTrack) ticker() (<-chan time.Time, func()) {
	if b == nil {
		return nil, func() {}
	}
	t := time.NewTicker(bootEvery)
	return t.C, t.Stop
}

// note records what was sent of m.
func (b *bootTrack) note(m record.Machine, v *adminv1.AdminMachine) {
	if b == nil {
		return
	}
	if m.State != record.Creating && m.State != record.Idle {
		delete(b.sent, m.ID)
		return
	}
	b.sent[m.ID] = bootSent{m: m, key: bootKey(v.GetBootPhase(), v.GetBootReason())}
}

// bootChanges lists the views whose boot status moved since they were sent.
func (s *Service) bootChanges(b *bootTrack, now time.Time) []*adminv1.AdminMachine {
	var out []*adminv1.AdminMachine
	for _, e := range b.sent {
		key := ""
		if st, ok := b.br.BootStatus(e.m.ID); ok {
			key = bootKey(st.Phase, st.Reason)
		}
		if key == e.key {
			continue
		}
		v := s.machineView(e.m, now)
		b.note(e.m, v)
		out = append(out, v)
	}
	return out
}

// bootKey is a boot status as one comparable string ("" for none).
func bootKey(phase, reason string) string {
	if phase == "" {
		return ""
	}
	return phase + "\x00" + reason
}
