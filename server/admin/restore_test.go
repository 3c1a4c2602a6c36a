package admin_test

import (
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// sharedFiles is a HostJournal: the last file of each kind, or a refusal.
type sharedFiles struct {
	mu    sync.Mutex
	files map[string][]byte
	fail  error
}

func (j *sharedFiles) save(kind string, file []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		return j.fail
	}
	j.files[kind] = file
	return nil
}

func (j *sharedFiles) get(kind string) []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.files[kind]
}

// TestHostJournal (--leader-elect, docs/ha.md): a cordon and a down
// declaration are shared before they are applied; a refusal of the
// journal refuses the write (Unavailable, with the cause) and leaves the
// backend and the file unchanged; and a new leader given the shared files
// (RestoreHostFiles) has the same cordons and declarations, with who made
// them and why.
func TestHostJournal(t *testing.T) {
	t.Parallel()
	j := &sharedFiles{files: map[string][]byte{}}
	opts := admintest.Options{AdminWrite: true, DownFile: downFile(t), HostJournal: j.save}
	s, pool := startPool(t, opts)
	c := adminClient(s, nil)
	if _, err := c.CordonHost(t.Context(), connect.NewRequest(&adminv1.CordonHostRequest{Host: "kvm-a2", Reason: "firmware"})); err != nil {
		t.Fatal(err)
	}
	if f := string(j.get(admin.HostFileCordons)); !strings.Contains(f, `"host": "kvm-a2"`) || !strings.Contains(f, "firmware") {
		t.Fatalf("shared cordon file:\n%s", f)
	}
	j.mu.Lock()
	j.fail = &record.Error{Code: record.CodeUnavailable, Msg: "journal: etcd down"}
	j.mu.Unlock()
	_, err := c.DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "powered off"}))
	wantCode(t, err, connect.CodeUnavailable)
	if err == nil || !strings.Contains(err.Error(), "etcd down") {
		t.Errorf("refusal without its cause: %v", err)
	}
	if calls := pool.downCalls(); len(calls) != 0 {
		t.Errorf("a refused declaration reached the backend: %v", calls)
	}
	if got := readFile(t, opts.DownFile); got != "" {
		t.Errorf("a refused declaration wrote the down file:\n%s", got)
	}
	j.mu.Lock()
	j.fail = nil
	j.mu.Unlock()
	if _, err := c.DeclareHostDown(t.Context(), connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: "kvm-b1", Reason: "powered off"})); err != nil {
		t.Fatal(err)
	}

	// The new leader: its own service, nothing of its own, the shared files.
	var svc *admin.Service
	s2, pool2 := startPool(t, admintest.Options{AdminWrite: true, Service: &svc})
	if pool2.cordoned("kvm-a2") {
		t.Fatal("the new leader's host is cordoned before the restore")
	}
	if err := svc.RestoreHostFiles(j.get(admin.HostFileCordons), j.get(admin.HostFileDowns)); err != nil {
		t.Fatal(err)
	}
	res, err := adminClient(s2, nil).ListHosts(t.Context(), connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range res.Msg.GetHosts() {
		switch h.GetName() {
		case "kvm-a2":
			if !h.GetCordoned() || h.GetCordon().GetReason() != "firmware" || h.GetCordon().GetBy() == "" {
				t.Errorf("kvm-a2 after the restore: %v", h)
			}
		case "kvm-b1":
			if h.GetState() != "down" || h.GetDown().GetReason() != "powered off" {
				t.Errorf("kvm-b1 after the restore: %v", h)
			}
		}
	}
	if err := svc.RestoreHostFiles([]byte("{"), nil); err == nil {
		t.Error("an unreadable shared file restored")
	}
}
