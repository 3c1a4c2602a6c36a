package soakkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// A violation's detail names the machine as the provider shows it, the
// fault just before, and only the provider's log lines about the machine.
func TestExplain(t *testing.T) {
	log := filepath.Join(t.TempDir(), "provider.log")
	if err := os.WriteFile(log, []byte("about m1: started\nabout m2: other\nabout m1: failed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := NewLedger()
	t0 := time.Now().Add(-10 * time.Second)
	l.AddFault(&FaultEvent{Kind: "partition", Host: "lab1", Start: time.Now().Add(-5 * time.Second), End: time.Now()})
	m := &pb.Machine{Id: "m1", State: pb.MachineState_MACHINE_STATE_FAILED, LastError: "boom"}
	got := l.Explain("Create of m1 FAILED", m, t0, &Proc{LogPath: log})
	for _, want := range []string{"Create of m1 FAILED", `machine m1 state=MACHINE_STATE_FAILED last_error="boom"`, "partition", "about m1: started", "about m1: failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("detail lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "about m2") {
		t.Errorf("detail holds another machine's log line:\n%s", got)
	}
	if got := l.Explain("no machine", nil, t0, &Proc{LogPath: log}); strings.Contains(got, "provider log about it") {
		t.Errorf("detail without a machine: %s", got)
	}
}

// TestPreviousSent: the send before t of the same machine, else t.
func TestPreviousSent(t *testing.T) {
	t.Parallel()
	l := NewLedger()
	t0 := time.Now()
	l.AddOp(&OpRecord{Machine: "a", Sent: t0})
	l.AddOp(&OpRecord{Machine: "b", Sent: t0.Add(time.Second)})
	l.AddOp(&OpRecord{Machine: "a", Sent: t0.Add(2 * time.Second)})
	if got := l.PreviousSent("a", t0.Add(2*time.Second)); !got.Equal(t0) {
		t.Fatalf("previous of a = %v, want %v", got, t0)
	}
	if at := t0.Add(-time.Second); !l.PreviousSent("a", at).Equal(at) {
		t.Fatal("no earlier send should give t itself")
	}
}
