package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// protocols are connect-go's three wire protocols; grpc-go is covered in
// grpc_test.go.
var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

func adminClient(s *admintest.Server, opts []connect.ClientOption) adminv1connect.AdminServiceClient {
	return adminv1connect.NewAdminServiceClient(s.HTTPClient(), s.URL, opts...)
}

func providerClient(s *admintest.Server) bigfleetv1alpha1connect.CapacityProviderClient {
	return bigfleetv1alpha1connect.NewCapacityProviderClient(s.HTTPClient(), s.URL, connect.WithGRPC())
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
}

// waitState polls until the machine is in st (transitions on the instant
// fake take microseconds; the bound is for a loaded CI machine).
func waitState(t *testing.T, s *admintest.Server, id string, st pb.MachineState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.Engine.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if pb.MachineState(m.State) == st {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", id, m.State, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func create(t *testing.T, s *admintest.Server, id string, shard string, epoch, seq int64) {
	t.Helper()
	_, err := providerClient(s).Create(t.Context(), connect.NewRequest(&pb.CreateRequest{
		MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}))
	if err != nil {
		t.Fatal(err)
	}
}

// failMachine drives id to FAILED through a Create the fake refuses.
func failMachine(t *testing.T, s *admintest.Server, id string) {
	t.Helper()
	s.Fake.SetFailure("create", id, errors.New("disk image is corrupt"))
	create(t, s, id, "", 0, 0)
	waitState(t, s, id, pb.MachineState_MACHINE_STATE_FAILED)
	s.Fake.SetFailure("create", id, nil)
}

// writes sums admin_writes_total for action and result over the caller
// identities ("" for all); -1 when the metric is not exported.
func writes(s *admintest.Server, action, result string) int { return writesBy(s, action, result, "") }

func writesBy(s *admintest.Server, action, result, identity string) int {
	mfs, _ := s.Registry.Gather()
	n := -1
	for _, mf := range mfs {
		if mf.GetName() != "admin_writes_total" {
			continue
		}
		n = 0
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["action"] == action && l["result"] == result && (identity == "" || l["identity"] == identity) {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// recv reads the next watch event or fails after a bound.
func recv(t *testing.T, st *connect.ServerStreamForClient[adminv1.WatchMachinesResponse]) *adminv1.WatchMachinesResponse {
	t.Helper()
	if !st.Receive() {
		t.Fatalf("watch ended: %v", st.Err())
	}
	return st.Msg()
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func fakeDelay(d map[string]time.Duration) fake.Options { return fake.Options{Delays: d} }
