package lifecycle

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestFullLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 4)
	ctx := t.Context()

	ack, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m001"})
	if err != nil || ack.Machine.State != record.Creating || ack.OperationID == "" {
		t.Fatalf("create: %v %+v", err, ack)
	}
	if ack.Machine.Host != (record.HostRef{}) || ack.Machine.Cluster != "" {
		t.Fatalf("CREATING must have no host and no cluster: %+v", ack.Machine)
	}
	m := f.waitState("m001", record.Idle)
	if m.Host.Provider != "test" || m.Host.Ref != "zone-b/bf-m001" {
		t.Fatalf("host = %+v", m.Host)
	}

	md := map[string]string{"k": "v"}
	ack, err = f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m001", ClusterID: "c1", BootstrapBlob: []byte("secret"), ShardMetadata: md})
	if err != nil || ack.Machine.State != record.Configuring || ack.Machine.Cluster != "c1" || ack.Machine.ShardMetadata["k"] != "v" {
		t.Fatalf("configure: %v %+v", err, ack.Machine)
	}
	md["k"] = "changed by caller"
	m = f.waitState("m001", record.Configured)
	if m.ShardMetadata["k"] != "v" || m.Cluster != "c1" {
		t.Fatalf("configured: %+v", m)
	}
	if got := f.be.blobs["m001"]; string(got) != "secret" {
		t.Fatalf("blob at backend = %q", got)
	}

	ack, err = f.e.Drain(ctx, record.DrainRequest{MachineID: "m001", GraceSeconds: 0})
	if err != nil || ack.Machine.State != record.Draining || ack.Machine.Cluster != "c1" {
		t.Fatalf("drain: %v %+v", err, ack.Machine)
	}
	m = f.waitState("m001", record.Idle)
	if m.Cluster != "" || m.ShardMetadata != nil {
		t.Fatalf("drain must clear cluster and metadata: %+v", m)
	}

	if _, err = f.e.Delete(ctx, record.DeleteRequest{MachineID: "m001"}); err != nil {
		t.Fatal(err)
	}
	m = f.waitState("m001", record.Speculative)
	if m.Host != (record.HostRef{}) {
		t.Fatalf("delete must clear host: %+v", m.Host)
	}
	if len(m.History) != 4 {
		t.Fatalf("history has %d entries, want 4", len(m.History))
	}
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 4, func(c *Config) { c.Seed[3].CapacityType = record.CapacityBareMetal })
	ctx := t.Context()
	f.toIdle("m000")
	f.toIdle("m003")
	big := make(map[string]string, record.MaxShardMetadataEntries+1)
	for i := range record.MaxShardMetadataEntries + 1 {
		big[fmt.Sprint(i)] = ""
	}
	cases := []struct {
		name string
		call func() error
		want record.Code
	}{
		{"empty id", func() error { _, err := f.e.Create(ctx, record.CreateRequest{}); return err }, record.CodeInvalid},
		{"get empty id", func() error { _, err := f.e.Get(ctx, ""); return err }, record.CodeInvalid},
		{"negative grace", func() error {
			_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m001", GraceSeconds: -1})
			return err
		}, record.CodeInvalid},
		{"blob over cap", func() error {
			_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c", BootstrapBlob: make([]byte, record.MaxBootstrapBlobBytes+1)})
			return err
		}, record.CodeInvalid},
		{"metadata over cap", func() error {
			_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c", ShardMetadata: big})
			return err
		}, record.CodeInvalid},
		{"unknown machine", func() error { _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "nope"}); return err }, record.CodeNotFound},
		{"get unknown", func() error { _, err := f.e.Get(ctx, "nope"); return err }, record.CodeNotFound},
		{"bare metal delete", func() error { _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m003"}); return err }, record.CodeUnimplemented},
		{"configure speculative", func() error {
			_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m001", ClusterID: "c"})
			return err
		}, record.CodeAborted},
		{"drain idle without drain history", func() error {
			_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"})
			return err
		}, record.CodeAborted},
		{"delete speculative", func() error { _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m002"}); return err }, record.CodeAborted},
	}
	for _, c := range cases {
		before, _ := f.e.List(ctx, record.ListQuery{})
		err := c.call()
		if got := codeOf(err); got != c.want {
			t.Errorf("%s: code %d (%v), want %d", c.name, got, err, c.want)
		}
		after, _ := f.e.List(ctx, record.ListQuery{Since: before.Revision})
		if len(after.Machines) != 0 {
			t.Errorf("%s: a refused request changed %d machines", c.name, len(after.Machines))
		}
	}
	_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m001", ClusterID: "c"})
	if !strings.Contains(err.Error(), "SPECULATIVE") {
		t.Errorf("out-of-position message must name the state: %v", err)
	}
}

func TestFailedMachineRefusesEverything(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := t.Context()
	f.be.setFail(record.OpCreate, errors.New("disk full"))
	f.e.Create(ctx, record.CreateRequest{MachineID: "m000"})
	m := f.waitState("m000", record.Failed)
	if m.LastError != "create failed: disk full" {
		t.Fatalf("last_error = %q", m.LastError)
	}
	calls := []func() error{
		func() error { _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"}); return err },
		func() error {
			_, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c"})
			return err
		},
		func() error { _, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"}); return err },
		func() error { _, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000"}); return err },
	}
	for i, call := range calls {
		if err := call(); codeOf(err) != record.CodeAborted || !strings.Contains(err.Error(), "FAILED") {
			t.Errorf("call %d on FAILED: %v", i, err)
		}
	}
	if m2, _ := f.e.Get(ctx, "m000"); m2.LastError != m.LastError || m2.State != record.Failed {
		t.Fatalf("FAILED record changed: %+v", m2)
	}
}

func TestIdempotentRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	ctx := t.Context()
	release := f.be.hold(record.OpCreate)
	a1, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"})
	if err != nil || a2.OperationID != a1.OperationID {
		t.Fatalf("retry in flight: %v %s vs %s", err, a2.OperationID, a1.OperationID)
	}
	release()
	f.waitState("m000", record.Idle)
	a3, _ := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"})
	if a3.OperationID != a1.OperationID || a3.Machine.State != record.Idle {
		t.Fatalf("create on IDLE must be a no-op with the same op id: %+v", a3)
	}
	if f.be.calls[record.OpCreate] != 1 {
		t.Fatalf("backend create ran %d times", f.be.calls[record.OpCreate])
	}

	c1, _ := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1"})
	f.waitState("m000", record.Configured)
	c2, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c1"})
	if err != nil || c2.OperationID != c1.OperationID {
		t.Fatalf("configure retry: %v", err)
	}
	if c1.OperationID == a1.OperationID {
		t.Fatal("a new transition must mint a fresh operation id")
	}
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "other"}); codeOf(err) != record.CodeAborted {
		t.Fatalf("cluster conflict: %v", err)
	}
	d1, _ := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"})
	f.waitState("m000", record.Idle)
	d2, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000"})
	if err != nil || d2.OperationID != d1.OperationID {
		t.Fatalf("drain retry after reaching IDLE: %v", err)
	}
	x1, _ := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000"})
	f.waitState("m000", record.Speculative)
	x2, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "m000"})
	if err != nil || x2.OperationID != x1.OperationID {
		t.Fatalf("delete retry: %v", err)
	}
	// Leaving the target makes the next transition new again.
	n1, _ := f.e.Create(ctx, record.CreateRequest{MachineID: "m000"})
	if n1.OperationID == a1.OperationID {
		t.Fatal("a second Create must not reuse the first one's operation id")
	}
}

func TestParallelRetriesCollapse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	release := f.be.hold(record.OpCreate)
	defer release()
	var wg sync.WaitGroup
	ids := make([]string, 32)
	for i := range ids {
		wg.Go(func() {
			ack, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
			if err != nil {
				t.Error(err)
			}
			ids[i] = ack.OperationID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("parallel retries got different op ids: %v", ids)
		}
	}
}

func TestRacingConflictingConfigures(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.toIdle("m000")
	release := f.be.hold(record.OpConfigure)
	defer release()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := map[string]int{}
	for i := range 16 {
		wg.Go(func() {
			c := fmt.Sprintf("c%d", i%4)
			_, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: c})
			mu.Lock()
			defer mu.Unlock()
			switch codeOf(err) {
			case 0:
				wins[c]++
			case record.CodeAborted:
			default:
				t.Errorf("unexpected %v", err)
			}
		})
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("exactly one cluster must win, got %v", wins)
	}
}

func TestShardMetadataVerbatim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.toIdle("m000")
	md := map[string]string{"nul": "a\x00b", "ctl": "\x01\x1f\x7f", "uni": "héllo 世界 🚀", "empty": "", "": "empty key"}
	for i := range 60 {
		md[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", i)
	}
	want := maps.Clone(md)
	ack, err := f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c", ShardMetadata: md})
	if err != nil {
		t.Fatal(err)
	}
	clear(md)
	if !maps.Equal(ack.Machine.ShardMetadata, want) {
		t.Fatal("ack metadata differs")
	}
	ack.Machine.ShardMetadata["nul"] = "aliased"
	m := f.waitState("m000", record.Configured)
	if !maps.Equal(m.ShardMetadata, want) {
		t.Fatal("stored metadata differs or aliases a caller's map")
	}
	l, _ := f.e.List(t.Context(), record.ListQuery{States: []record.State{record.Configured}})
	if len(l.Machines) != 1 || !maps.Equal(l.Machines[0].ShardMetadata, want) {
		t.Fatal("list metadata differs")
	}
}

func TestTimeoutFailsAndLateCompletionDiscarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, func(c *Config) { c.CreateTimeout = 50 * time.Millisecond })
	release := f.be.hold(record.OpCreate)
	ack, _ := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	m := f.waitState("m000", record.Failed)
	if m.LastError != "create timed out after 50ms" {
		t.Fatalf("last_error = %q", m.LastError)
	}
	release()
	time.Sleep(20 * time.Millisecond)
	m2, _ := f.e.Get(t.Context(), "m000")
	if m2.State != record.Failed || m2.LastError != m.LastError || m2.OperationID != ack.OperationID {
		t.Fatalf("late completion was not discarded: %+v", m2)
	}
}

func TestDeadlineEvenIfBackendIgnoresContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, func(c *Config) { c.DeleteTimeout = 30 * time.Millisecond })
	f.toIdle("m000")
	gate := make(chan struct{})
	defer close(gate)
	f.be.mu.Lock()
	f.be.gate[record.OpDelete] = gate
	f.be.mu.Unlock()
	f.e.Delete(t.Context(), record.DeleteRequest{MachineID: "m000"})
	m := f.waitState("m000", record.Failed)
	if m.LastError != "delete timed out after 30ms" {
		t.Fatalf("last_error = %q", m.LastError)
	}
}

func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.st.mu.Lock()
	f.st.fail = errors.New("disk gone")
	f.st.mu.Unlock()
	_, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000"})
	if codeOf(err) != record.CodeUnavailable || strings.Contains(err.Error(), "disk gone") {
		t.Fatalf("got %v", err)
	}
	if m, _ := f.e.Get(t.Context(), "m000"); m.State != record.Speculative {
		t.Fatalf("state changed to %s", m.State)
	}
}

func TestBlobNeverStored(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.toIdle("m000")
	secret := []byte("TOP-SECRET-JOIN-TOKEN")
	f.e.Configure(t.Context(), record.ConfigureRequest{MachineID: "m000", ClusterID: "c", BootstrapBlob: secret})
	f.waitState("m000", record.Configured)
	for _, m := range f.st.machines {
		if bytes.Contains([]byte(fmt.Sprintf("%+v", m)), secret) {
			t.Fatal("the bootstrap blob reached the store")
		}
	}
}

func TestWatchSeesChanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ch, lost, cancel := f.e.Watch(16)
	defer cancel()
	f.toIdle("m000")
	got := []record.State{(<-ch).State, (<-ch).State}
	if got[0] != record.Creating || got[1] != record.Idle || lost() {
		t.Fatalf("watch saw %v", got)
	}
}
