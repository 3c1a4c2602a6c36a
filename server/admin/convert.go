package admin

import (
	"cmp"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/bigfleet/libvirt-provider/backend"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// ts is nil for the zero time, so "never" stays unset on the wire.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func stateToProto(s record.State) pb.MachineState {
	if s <= record.StateUnspecified || s > record.Failed {
		return pb.MachineState_MACHINE_STATE_FAILED
	}
	return pb.MachineState(s)
}

// machineToProto embeds exactly what CapacityProvider returns (through the
// server's own mapping) and adds the bookkeeping BigFleet never sees.
func machineToProto(m record.Machine, now time.Time) *adminv1.AdminMachine {
	out := &adminv1.AdminMachine{
		Machine:       convert.MachineToProto(m),
		Domain:        m.Domain,
		OperationId:   m.OperationID,
		OperationKind: string(m.OpKind),
		StateSince:    ts(m.StateSince),
		Revision:      m.Revision,
		Host:          machineHost(m),
		Addresses:     m.GuestAddresses(),
	}
	if !m.StateSince.IsZero() {
		out.TimeInState = durationpb.New(max(now.Sub(m.StateSince), 0))
	}
	if m.State == record.Creating || m.State == record.Configuring ||
		m.State == record.Draining || m.State == record.Deleting {
		out.OperationDeadline = ts(m.OpDeadline)
	}
	return out
}

// machineView is machineToProto with the backend's runtime boot status
// of a CREATING or IDLE machine (backend.BootReporter): "booting" beside
// IDLE while a restarted guest boots. A watch carries it as of the record's
// last change; Get and List read it afresh.
func (s *Service) machineView(m record.Machine, now time.Time) *adminv1.AdminMachine {
	out := machineToProto(m, now)
	if m.State != record.Creating && m.State != record.Idle {
		return out
	}
	if br, ok := s.eng.Backend().(backend.BootReporter); ok {
		if st, ok := br.BootStatus(m.ID); ok {
			out.BootPhase, out.BootReason = st.Phase, st.Reason
		}
	}
	return out
}

func transitionToProto(t record.Transition, now time.Time) *adminv1.Transition {
	out := &adminv1.Transition{
		OperationId: t.OperationID,
		Kind:        string(t.Kind),
		FromState:   stateToProto(t.From),
		ToState:     stateToProto(t.To),
		Started:     ts(t.Started),
		Ended:       ts(t.Ended),
		Outcome:     t.Outcome,
		LastError:   t.LastError,
		Note:        t.Note,
	}
	end := t.Ended
	if end.IsZero() {
		end = now
	}
	if !t.Started.IsZero() {
		out.Duration = durationpb.New(max(end.Sub(t.Started), 0))
	}
	return out
}

func reconcileToProto(r lifecycle.ReconcileReport) *adminv1.ReconcileSummary {
	out := &adminv1.ReconcileSummary{Time: ts(r.At), Adopted: int32(r.Adopted), Vanished: int32(r.Vanished),
		Restarted: int32(r.Restarted), NotRunning: int32(r.NotRunning), Waiting: slices.Clone(r.Waiting)}
	for z, e := range r.Zones {
		out.Zones = append(out.Zones, &adminv1.ZoneOutcome{Zone: z, Error: e})
	}
	slices.SortFunc(out.Zones, func(a, b *adminv1.ZoneOutcome) int { return cmp.Compare(a.Zone, b.Zone) })
	return out
}
