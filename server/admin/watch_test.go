package admin_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestWatchMachines: a snapshot, SYNCED, then the live changes a Create
// makes, over each protocol (gRPC-Web is what the browser uses).
func TestWatchMachines(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := admintest.Start(t, admintest.Options{Machines: 3,
				Fake: fakeDelay(map[string]time.Duration{"create": 50 * time.Millisecond})})
			ctx := ctxTimeout(t)
			st, err := adminClient(s, p.opts).WatchMachines(ctx, connect.NewRequest(&adminv1.WatchMachinesRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()

			ev := recv(t, st)
			if ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT || len(ev.GetMachines()) != 3 {
				t.Fatalf("first event = %v", ev)
			}
			if ev := recv(t, st); ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_SYNCED {
				t.Fatalf("second event = %v", ev)
			}

			create(t, s, "m-002", "", 0, 0)
			var seen []pb.MachineState
			var lastRev uint64
			for len(seen) == 0 || seen[len(seen)-1] != pb.MachineState_MACHINE_STATE_IDLE {
				ev := recv(t, st)
				if ev.GetType() == adminv1.WatchEventType_WATCH_EVENT_TYPE_HEARTBEAT {
					continue
				}
				if ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED {
					t.Fatalf("event = %v", ev)
				}
				for _, m := range ev.GetMachines() {
					if m.GetMachine().GetId() != "m-002" || m.GetRevision() <= lastRev {
						t.Fatalf("unexpected change %v", m)
					}
					lastRev = m.GetRevision()
					seen = append(seen, m.GetMachine().GetState())
				}
			}
			if seen[0] != pb.MachineState_MACHINE_STATE_CREATING {
				t.Errorf("states seen = %v, want CREATING then IDLE", seen)
			}
		})
	}
}

// TestWatchHeartbeat: an idle stream still carries a sign of life, which
// is how the page tells a quiet fleet from a dead connection.
func TestWatchHeartbeat(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Machines: 1, Heartbeat: 20 * time.Millisecond})
	st, err := adminClient(s, protocols[2].opts).WatchMachines(ctxTimeout(t), connect.NewRequest(&adminv1.WatchMachinesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recv(t, st)
	recv(t, st)
	if ev := recv(t, st); ev.GetType() != adminv1.WatchEventType_WATCH_EVENT_TYPE_HEARTBEAT || ev.GetServerTime() == nil {
		t.Fatalf("event = %v", ev)
	}
}

// TestWatchLargeSnapshot: the snapshot is chunked, and every machine
// appears exactly once before SYNCED.
func TestWatchLargeSnapshot(t *testing.T) {
	t.Parallel()
	s := admintest.Start(t, admintest.Options{Machines: 1300})
	st, err := adminClient(s, nil).WatchMachines(ctxTimeout(t), connect.NewRequest(&adminv1.WatchMachinesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids := map[string]bool{}
	chunks := 0
	for {
		ev := recv(t, st)
		if ev.GetType() == adminv1.WatchEventType_WATCH_EVENT_TYPE_SYNCED {
			break
		}
		chunks++
		for _, m := range ev.GetMachines() {
			if ids[m.GetMachine().GetId()] {
				t.Fatalf("duplicate %s", m.GetMachine().GetId())
			}
			ids[m.GetMachine().GetId()] = true
		}
	}
	if len(ids) != 1300 || chunks < 3 {
		t.Errorf("got %d machines in %d chunks", len(ids), chunks)
	}
}

// TestCloseEndsWatches: shutdown must not wait for open admin pages.
func TestCloseEndsWatches(t *testing.T) {
	t.Parallel()
	var svc *admin.Service
	s := admintest.Start(t, admintest.Options{Machines: 1, Service: &svc})
	st, err := adminClient(s, nil).WatchMachines(ctxTimeout(t), connect.NewRequest(&adminv1.WatchMachinesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recv(t, st)
	recv(t, st)
	svc.Close()
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatalf("watch ended with %v, want a clean end", err)
	}
}
