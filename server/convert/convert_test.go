package convert

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestMachineToProto(t *testing.T) {
	t.Parallel()
	m := record.Machine{
		ID: "m", State: record.Configured, Host: record.HostRef{Provider: "p", Ref: "z/d"},
		Labels: map[string]string{"a": "1"}, ShardMetadata: map[string]string{"k": "v"},
		Resources: map[string]string{"cpu": "1"}, Cluster: "c", CapacityType: record.CapacitySpot,
		InterruptionProbability: 0.1,
	}
	p := MachineToProto(m)
	m.Labels["a"], m.ShardMetadata["k"], m.Resources["cpu"] = "x", "x", "x"
	if p.GetLabels()["a"] != "1" || p.GetShardMetadata()["k"] != "v" || p.GetResources().GetResources()["cpu"] != "1" {
		t.Error("proto aliases the record's maps")
	}
	if p.GetHost().GetRef() != "z/d" || p.GetCluster() != "c" || p.GetCapacityType() != pb.CapacityType_CAPACITY_TYPE_SPOT {
		t.Errorf("fields lost: %v", p)
	}
	if MachineToProto(record.Machine{State: record.Creating}).Host != nil {
		t.Error("zero HostRef must be absent")
	}
	for _, s := range []record.State{record.StateUnspecified, -1, 99} {
		if got := stateToProto(s); got == pb.MachineState_MACHINE_STATE_UNSPECIFIED {
			t.Errorf("state %d mapped to UNSPECIFIED", s)
		}
	}
	for _, s := range record.AllStates {
		if got := stateToProto(s); got.String() != "MACHINE_STATE_"+s.String() {
			t.Errorf("state %v → %v", s, got)
		}
	}
}

// TestErrorTable pins the one error→code mapping.
func TestErrorTable(t *testing.T) {
	t.Parallel()
	le := func(c record.Code) error { return &record.Error{Code: c, Msg: "m"} }
	cases := []struct {
		err  error
		want connect.Code
	}{
		{le(record.CodeInvalid), connect.CodeInvalidArgument},
		{le(record.CodeFenced), connect.CodeFailedPrecondition},
		{le(record.CodeNotFound), connect.CodeNotFound},
		{le(record.CodeUnimplemented), connect.CodeUnimplemented},
		{le(record.CodeAborted), connect.CodeAborted},
		{le(record.CodeUnavailable), connect.CodeUnavailable},
		{le(record.CodePermission), connect.CodePermissionDenied},
		{le(99), connect.CodeInternal},
		{fmt.Errorf("wrapped: %w", le(record.CodeFenced)), connect.CodeFailedPrecondition},
		{context.Canceled, connect.CodeCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{fmt.Errorf("zone z: %w", backend.ErrHostUnavailable), connect.CodeUnavailable},
		{errors.New("disk on fire"), connect.CodeInternal},
		{WireError(le(record.CodeAborted)), connect.CodeAborted}, // already mapped: passes through
	}
	for _, tc := range cases {
		if got := connect.CodeOf(WireError(tc.err)); got != tc.want {
			t.Errorf("WireError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if WireError(nil) != nil {
		t.Error("WireError(nil) != nil")
	}
	// FailedPrecondition is reserved for fencing.
	for c := range codeOf {
		if c != record.CodeFenced && codeOf[c] == connect.CodeFailedPrecondition {
			t.Errorf("code %d also maps to FailedPrecondition", c)
		}
	}
}

// TestWireLabelsDropMirrors: the two labels that only repeat instance_type
// and zone are not sent; every other label is, and a same-key label with
// another value (not a copy) is kept.
func TestWireLabelsDropMirrors(t *testing.T) {
	t.Parallel()
	base := record.Machine{ID: "m", InstanceType: "kvm.small", Zone: "zone-a"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{"only mirrors", map[string]string{
			"node.kubernetes.io/instance-type": "kvm.small", "topology.kubernetes.io/zone": "zone-a"}, nil},
		{"mirrors and own", map[string]string{
			"node.kubernetes.io/instance-type": "kvm.small", "topology.kubernetes.io/zone": "zone-a", "team": "ml"},
			map[string]string{"team": "ml"}},
		{"not a copy", map[string]string{"topology.kubernetes.io/zone": "zone-b", "x": ""},
			map[string]string{"topology.kubernetes.io/zone": "zone-b", "x": ""}},
		{"none", nil, nil},
	} {
		m := base
		m.Labels = c.labels
		got := MachineToProto(m).GetLabels()
		if len(got) != len(c.want) {
			t.Errorf("%s: labels %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if w, ok := got[k]; !ok || w != v {
				t.Errorf("%s: labels %v, want %v", c.name, got, c.want)
			}
		}
		if len(c.labels) > 0 && len(m.Labels) != len(c.labels) {
			t.Errorf("%s: the record's map was changed", c.name)
		}
	}
}
