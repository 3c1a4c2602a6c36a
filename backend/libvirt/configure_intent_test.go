package libvirt

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// watchedAgent is the fake agent with a look at the domain's metadata as
// the first command that reaches the guest's files is sent.
type watchedAgent struct {
	*fakeAgent
	once  sync.Once
	look  func() meta.Metadata
	first meta.Metadata
}

func (w *watchedAgent) Command(ctx context.Context, req []byte, d time.Duration) ([]byte, error) {
	if strings.Contains(string(req), `"guest-file-open"`) || strings.Contains(string(req), `"guest-exec"`) {
		w.once.Do(func() { w.first = w.look() })
	}
	return w.fakeAgent.Command(ctx, req, d)
}

// TestConfigureRecordsIntentFirst (issue 41): a Configure writes its
// intent (operation, cluster, shard metadata; never the blob) into the
// domain's metadata before anything reaches the guest, and the listing
// carries it, so a provider that lost its state file finds the Configure
// cut short. A failed Configure keeps it (the guest says how it ended);
// a successful one removes it with the binding it records; so do
// FinishConfigure and RollBackConfigure (the latter only for its own
// operation).
func TestConfigureRecordsIntentFirst(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	w := &watchedAgent{fakeAgent: newFakeAgent(), look: func() meta.Metadata { return readMD(t, c, pl.Domain) }}
	b.guests.Transport = func(guest.Target) guestagent.Transport { return w }
	ctx := context.Background()

	failed := configureSpec(pl, "m1", "exit3", []byte("secret-blob"))
	if err := b.Configure(ctx, failed); err == nil {
		t.Fatal("want the hook's exit 3")
	}
	if ci := w.first.Configure; ci.OperationID != failed.OperationID || ci.ClusterID != "exit3" || !maps.Equal(ci.ShardMetadata, failed.ShardMetadata) || ci.Since.IsZero() {
		t.Fatalf("metadata as the first command reached the guest: %+v; want the intent of %s", w.first, failed.OperationID)
	}
	md := readMD(t, c, pl.Domain)
	if md.Configure.OperationID != failed.OperationID || md.ClusterID != "" {
		t.Fatalf("after a failed Configure: %+v; want its intent kept, no binding", md)
	}
	if s, _ := md.Marshal(false); strings.Contains(s, "secret-blob") {
		t.Fatal("the blob is in the metadata")
	}
	if o := listedMachine(t, b, "m1"); o.Configure.OperationID != failed.OperationID || o.Configure.ClusterID != "exit3" || o.ClusterID != "" {
		t.Fatalf("listed: %+v; want the intent carried", o)
	}

	// Another operation's rollback leaves the intent; its own removes it.
	if err := b.RollBackConfigure(ctx, backend.ConfigureSpec{MachineID: "m1", OperationID: "op-other", Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, c, pl.Domain); md.Configure.OperationID != failed.OperationID {
		t.Fatalf("another op's rollback removed the intent: %+v", md)
	}
	if err := b.RollBackConfigure(ctx, backend.ConfigureSpec{MachineID: "m1", OperationID: failed.OperationID, Placement: pl}); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, c, pl.Domain); md.Configure.Begun() || md.ClusterID != "" {
		t.Fatalf("after the rollback: %+v; want no intent, no binding", md)
	}

	ok := configureSpec(pl, "m1", "c1", []byte("secret-blob"))
	if err := b.Configure(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, c, pl.Domain); md.Configure.Begun() || md.ClusterID != "c1" || md.OperationID != ok.OperationID {
		t.Fatalf("after a successful Configure: %+v; want the binding, no intent", md)
	}
	if o := listedMachine(t, b, "m1"); o.Configure.Begun() {
		t.Fatalf("listed: %+v; want no intent", o)
	}
}

// FinishConfigure (a cut Configure whose hook finished ok) removes the
// intent with the binding it records.
func TestFinishConfigureClearsIntent(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	ctx := context.Background()
	cs := configureSpec(pl, "m1", "exit3", []byte("blob"))
	if err := b.Configure(ctx, cs); err == nil {
		t.Fatal("want the hook's exit 3")
	}
	cs.ClusterID, cs.BootstrapBlob = "c1", nil
	if err := b.FinishConfigure(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, c, pl.Domain); md.Configure.Begun() || md.ClusterID != "c1" {
		t.Fatalf("after FinishConfigure: %+v; want the binding, no intent", md)
	}
}
