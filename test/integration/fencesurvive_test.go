//go:build integration

package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// TestFenceSurvivesLostState (issue 15 case 5): a machine created and
// configured under epoch 5 records its fence marks in its domain metadata;
// the provider stops, its --state file is deleted, and the restarted
// provider rebuilds the machine CONFIGURED from libvirt with its marks: a
// Drain with epoch 4 is FailedPrecondition and changes nothing, one with
// epoch 6 passes and records the new mark. Before the fix the epoch-4
// Drain was accepted.
func TestFenceSurvivesLostState(t *testing.T) {
	e := loadEnv(t)
	const name = "it-fence"
	const shard = "shard-it"
	sweepAtEnd(t, e, name)
	state := filepath.Join(t.TempDir(), "state.db")
	cfg := provCfg{Name: name, State: state, Slots: 1}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	domain := meta.DomainName(name, id)

	p.accept(t, "Create", &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: 5, SequenceNumber: 1})
	p.awaitOneOf(t, id, 3*time.Minute, stIdle)
	if got := domainMetadata(t, e, domain).Marks; !maps.Equal(got, map[string]backend.FenceMark{shard: {Epoch: 5, Sequence: 1}}) {
		t.Fatalf("marks defined by Create: %v (the engine must hand the backend the machine's marks)", got)
	}
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-fence", BootstrapBlob: []byte("fence"),
		ShardId: shard, ShardEpoch: 5, SequenceNumber: 2})
	p.awaitOneOf(t, id, 3*time.Minute, stConfigured)
	if got := domainMetadata(t, e, domain).Marks; !maps.Equal(got, map[string]backend.FenceMark{shard: {Epoch: 5, Sequence: 2}}) {
		t.Fatalf("marks recorded by Configure: %v", got)
	}

	p.stop(t)
	must(t, os.Remove(state))
	t0 := time.Now()
	p = startProvider(t, e, cfg)
	m, _ := p.awaitOneOf(t, id, time.Minute, stConfigured)
	t.Logf("TIMING restart without state → machine rebuilt CONFIGURED in %s", time.Since(t0).Round(time.Millisecond))
	if m.GetCluster() != "c-fence" {
		t.Fatalf("rebuilt as %+v", m)
	}

	var ack pb.TransitionAck
	err := p.call(t.Context(), "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2,
		ShardId: shard, ShardEpoch: 4, SequenceNumber: 99}, &ack)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Drain with epoch 4 after epoch 5, state file lost: %v, want FailedPrecondition", err)
	}
	if m := p.get(t, id); m.GetState() != stConfigured || m.GetCluster() != "c-fence" {
		t.Fatalf("the refused Drain changed the machine: %v %q", m.GetState(), m.GetCluster())
	}
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2, ShardId: shard, ShardEpoch: 6})
	p.awaitOneOf(t, id, 2*time.Minute, stIdle)
	md := domainMetadata(t, e, domain)
	if md.ClusterID != "" || !maps.Equal(md.Marks, map[string]backend.FenceMark{shard: {Epoch: 6}}) {
		t.Fatalf("after the epoch-6 Drain: cluster %q marks %v", md.ClusterID, md.Marks)
	}
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}

// TestRefusedNewcomersLeaveNoMarkOnTheHost (issue 39) on real libvirt:
// invented shard ids whose calls on a machine are refused (Aborted for
// its state) leave no mark in the domain's metadata, so a provider that
// loses its state file and rebuilds from the host restores only the real
// shard's mark, and the real shard drives the machine on to the end.
// Before the fix each refused newcomer's mark went to the store and, with
// the next transition, into the metadata, and 32 of them refused the real
// shard's first call (ResourceExhausted), after the restart too.
func TestRefusedNewcomersLeaveNoMarkOnTheHost(t *testing.T) {
	e := loadEnv(t)
	const name = "it-newcomer"
	const shard = "shard-real"
	sweepAtEnd(t, e, name)
	state := filepath.Join(t.TempDir(), "state.db")
	cfg := provCfg{Name: name, State: state, Slots: 1}
	p := startProvider(t, e, cfg)
	id := p.ids(t)[0]
	domain := meta.DomainName(name, id)
	invented := 0
	refuse := func(n int, req func(shard string) (string, proto.Message)) {
		t.Helper()
		for range n {
			invented++
			method, r := req(fmt.Sprintf("invented-%05d", invented))
			if err := p.call(t.Context(), method, r, new(pb.TransitionAck)); status.Code(err) != codes.Aborted {
				t.Fatalf("invented shard %d's %s: %v; want Aborted", invented, method, err)
			}
		}
	}
	drainIdle := func(s string) (string, proto.Message) {
		return "Drain", &pb.DrainRequest{MachineId: id, ShardId: s, ShardEpoch: 1, SequenceNumber: 1}
	}
	otherCluster := func(s string) (string, proto.Message) {
		return "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-other", BootstrapBlob: []byte("x"),
			ShardId: s, ShardEpoch: 1, SequenceNumber: 1}
	}
	real := func(step int64) map[string]backend.FenceMark {
		return map[string]backend.FenceMark{shard: {Epoch: 5, Sequence: step}}
	}

	p.accept(t, "Create", &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: 5, SequenceNumber: 1})
	p.awaitOneOf(t, id, 3*time.Minute, stIdle)
	refuse(2000, drainIdle)
	p.accept(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-real", BootstrapBlob: []byte("real"),
		ShardId: shard, ShardEpoch: 5, SequenceNumber: 2})
	p.awaitOneOf(t, id, 3*time.Minute, stConfigured)
	if got := domainMetadata(t, e, domain).Marks; !maps.Equal(got, real(2)) {
		t.Fatalf("marks recorded by the real shard's Configure after 2000 refused newcomers: %v; want %v", got, real(2))
	}
	refuse(2000, otherCluster)

	p.stop(t)
	must(t, os.Remove(state))
	p = startProvider(t, e, cfg)
	p.awaitOneOf(t, id, time.Minute, stConfigured)
	refuse(2000, otherCluster)
	p.accept(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 2, ShardId: shard, ShardEpoch: 5, SequenceNumber: 3})
	p.awaitOneOf(t, id, 2*time.Minute, stIdle)
	if got := domainMetadata(t, e, domain).Marks; !maps.Equal(got, real(3)) {
		t.Fatalf("marks after the state file was lost and the real shard drained: %v; want %v", got, real(3))
	}
	p.accept(t, "Delete", &pb.DeleteRequest{MachineId: id, ShardId: shard, ShardEpoch: 5, SequenceNumber: 4})
	p.awaitOneOf(t, id, 2*time.Minute, stSpeculative)
	p.settle(t, id)
	assertNothingLeft(t, e, name)
}
