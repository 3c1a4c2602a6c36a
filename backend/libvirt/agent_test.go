package libvirt

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/guestagent"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/guest"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

// fakeAgent answers like qemu-ga running the image contract's hooks:
// bootstrap exits 3 for cluster "exit3", drain succeeds, no ready hook.
type fakeAgent struct {
	mu      sync.Mutex
	files   map[string][]byte
	open    map[int64]string
	next    int64
	exits   map[int64]int
	cluster string
	calls   int
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{files: map[string][]byte{"/opt/bigfleet/bootstrap": nil, "/opt/bigfleet/drain": nil},
		open: map[int64]string{}, exits: map[int64]int{}}
}

func (a *fakeAgent) Command(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
	var r struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	var args struct {
		Path, Mode  string
		Handle, PID int64
		Arg         []string
		Buf         string `json:"buf-b64"`
		ID          int64
	}
	_ = json.Unmarshal(r.Arguments, &args)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	ret := func(v any) ([]byte, error) { return json.Marshal(map[string]any{"return": v}) }
	switch r.Execute {
	case "guest-ping":
		return ret(map[string]any{})
	case "guest-sync":
		return ret(args.ID)
	case "guest-file-open":
		if _, ok := a.files[args.Path]; !ok && args.Mode == "r" {
			return nil, &guestagent.AgentError{Desc: "Failed to open file '" + args.Path + "': No such file or directory"}
		}
		a.next++
		a.open[a.next] = args.Path
		if args.Mode == "w" {
			a.files[args.Path] = nil
		}
		return ret(a.next)
	case "guest-file-write":
		b, _ := base64.StdEncoding.DecodeString(args.Buf)
		p := a.open[args.Handle]
		a.files[p] = append(a.files[p], b...)
		return ret(map[string]any{"count": len(b), "eof": false})
	case "guest-file-close":
		delete(a.open, args.Handle)
		return ret(map[string]any{})
	case "guest-exec":
		a.next++
		code := 0
		if args.Path == "/bin/sh" {
			a.script(args.Arg)
			a.exits[a.next] = 0
			return ret(map[string]any{"pid": a.next})
		}
		if args.Path == "/usr/bin/setsid" && len(args.Arg) > 8 && args.Arg[3] == "bigfleet-traced" {
			// The traced wrapper (sh -c script $0 dir name trace op hook args...).
			args.Path, args.Arg = args.Arg[8], args.Arg[9:]
		} else if args.Path == "/usr/bin/setsid" && len(args.Arg) > 6 {
			// The pid-recording wrapper (sh -c script $0 dir name hook args...).
			args.Path, args.Arg = args.Arg[6], args.Arg[7:]
		}
		if args.Path == "/opt/bigfleet/bootstrap" {
			// The cluster id is the value after "--" (argv ends options).
			cluster := ""
			if i := slices.Index(args.Arg, "--"); i >= 0 && i+1 < len(args.Arg) {
				cluster = args.Arg[i+1]
			}
			if cluster == "exit3" {
				code = 3
			} else {
				a.cluster = cluster
			}
		}
		if _, ok := a.files[args.Path]; !ok {
			return nil, &guestagent.AgentError{Desc: "Failed to execute child process: No such file or directory"}
		}
		a.exits[a.next] = code
		return ret(map[string]any{"pid": a.next})
	case "guest-exec-status":
		code := a.exits[args.PID]
		st := map[string]any{"exited": true, "exitcode": code}
		if code != 0 {
			st["err-data"] = base64.StdEncoding.EncodeToString([]byte("bootstrap failed on purpose"))
		}
		return ret(st)
	}
	return nil, &guestagent.AgentError{Class: "CommandNotFound", Desc: r.Execute}
}

// script plays guestagent's bookkeeping scripts ("-c", script, $0, args):
// the tidy that creates the empty blob file, the rename into place; the
// rest (reaping, group kills) has nothing to act on here.
func (a *fakeAgent) script(arg []string) {
	if len(arg) < 3 {
		return
	}
	switch v := arg[3:]; arg[2] {
	case "bigfleet-tidy":
		for p := range a.files {
			if strings.HasPrefix(p, v[1]+"/") {
				delete(a.files, p)
			}
		}
		if v[2] != "" {
			a.files[v[1]+"/"+v[2]] = nil
		}
	case "bigfleet-blob":
		a.files[v[2]] = a.files[v[0]+"/"+v[1]]
		delete(a.files, v[0]+"/"+v[1])
	}
}

func withFakeAgent(b *Backend) *fakeAgent {
	a := newFakeAgent()
	b.guests.Transport = func(guest.Target) guestagent.Transport { return a }
	return a
}

func configureSpec(pl backend.Placement, id, cluster string, blob []byte) backend.ConfigureSpec {
	return backend.ConfigureSpec{MachineID: id, OperationID: "op-cfg-" + id, Placement: pl, ClusterID: cluster,
		BootstrapBlob: blob, ShardMetadata: map[string]string{"shard": "s1", "ctl": "a\x01b", "": ""}}
}

func TestConfigureRecordsBindingOnlyAfterSuccess(t *testing.T) {
	t.Parallel()
	b, logs := newTestBackend(t, nil)
	a := withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl := mustCreate(t, b, "m1")
	blob := append(bytes.Repeat([]byte("secret-bootstrap\x00"), 4000), 0xff)

	cs := configureSpec(pl, "m1", "exit3", blob)
	err := b.Configure(ctx, cs)
	var he *guestagent.HookError
	if !errors.As(err, &he) || he.Result.ExitCode != 3 || !strings.Contains(err.Error(), "status 3") {
		t.Fatalf("err = %v, want bootstrap exit 3", err)
	}
	if md := readMD(t, c, pl.Domain); md.ClusterID != "" || md.ShardMetadata != nil {
		t.Fatalf("failed configure left a binding: %+v", md)
	}

	cs = configureSpec(pl, "m1", "c1", blob)
	if err := b.Configure(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.files["/opt/bigfleet/bootstrap.blob"], blob) || a.cluster != "c1" {
		t.Fatal("blob not delivered byte for byte or hook did not see the cluster")
	}
	md := readMD(t, c, pl.Domain)
	if md.ClusterID != "c1" || !maps.Equal(md.ShardMetadata, cs.ShardMetadata) || md.OperationID != cs.OperationID {
		t.Fatalf("binding %+v", md)
	}
	if strings.Contains(logs.String(), "secret-bootstrap") {
		t.Fatal("blob logged")
	}

	// A failed re-configure clears the binding it finds.
	if err := b.Configure(ctx, configureSpec(pl, "m1", "exit3", blob)); err == nil {
		t.Fatal("want failure")
	}
	if md := readMD(t, c, pl.Domain); md.ClusterID != "" {
		t.Fatalf("binding survived a failed configure: %+v", md)
	}

	if err := b.Configure(ctx, cs); err != nil {
		t.Fatal(err)
	}
	ds := backend.DrainSpec{MachineID: "m1", OperationID: "op-drain", Placement: pl, ClusterID: "c1", Grace: time.Second}
	if err := b.Drain(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if md := readMD(t, c, pl.Domain); md.ClusterID != "" || md.ShardMetadata != nil || md.OperationID != "op-drain" {
		t.Fatalf("drain left %+v", md)
	}
}

func TestConfigureOnAStrangerOrMissingDomain(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	name := meta.DomainName(b.cfg.Provider, "m1")
	defineStranger(t, c, name, nil)
	pl := backend.Placement{Zone: "z1", Domain: name}
	if err := b.Configure(ctx, configureSpec(pl, "m1", "c1", nil)); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("stranger: %v", err)
	}
	if err := b.Drain(ctx, backend.DrainSpec{MachineID: "m1", Placement: pl, ClusterID: "c"}); !errors.Is(err, backend.ErrNotOurs) {
		t.Fatalf("stranger drain: %v", err)
	}
	pl.Domain = meta.DomainName(b.cfg.Provider, "m2")
	if err := b.Configure(ctx, configureSpec(pl, "m2", "c1", nil)); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// The test driver has no guest agent: the real transport reports it and
// Configure fails without a binding.
func TestConfigureWithoutAgent(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	pl := mustCreate(t, b, "m1")
	err := b.Configure(context.Background(), configureSpec(pl, "m1", "c1", []byte("x")))
	if err == nil || !strings.HasPrefix(err.Error(), "configure: ") {
		t.Fatalf("err = %v", err)
	}
	if md := readMD(t, testConn(t, b, "z1"), pl.Domain); md.ClusterID != "" {
		t.Fatalf("binding %+v", md)
	}
}

// A Configure cut by a restart is abandoned as the provider starts, often
// while the host is still on its first connection attempt: AbandonConfigure
// waits for that attempt and then tidies the guest, instead of failing at
// once and leaving the partial blob behind.
func TestAbandonWaitsForFirstConnect(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	cfg := testConfig(t)
	b1, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, b1)
	pl := mustCreate(t, b1, "m1")
	_ = b1.Close()

	thaw := f.freezeDials() // the restarted provider's connect hangs a while
	b2, err := newBackend(cfg, f.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	a := withFakeAgent(b2)
	a.files["/opt/bigfleet/.bootstrap.blob.partial/bootstrap.blob"] = []byte("half")
	done := make(chan error, 1)
	go func() { done <- b2.AbandonConfigure(context.Background(), "m1", pl) }()
	select {
	case err := <-done:
		t.Fatalf("AbandonConfigure returned %v while the host was still connecting", err)
	case <-time.After(300 * time.Millisecond):
	}
	thaw()
	if err := <-done; err != nil {
		t.Fatalf("AbandonConfigure after the connect: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.files {
		if strings.Contains(p, "partial") {
			t.Fatalf("the partial blob %s is still in the guest", p)
		}
	}
}

// A host that never finishes its first attempt within the caller's
// deadline: AbandonConfigure says so, as a host error.
func TestAbandonConnectingDeadline(t *testing.T) {
	t.Parallel()
	f := newFaults(t)
	thaw := f.freezeDials()
	defer thaw()
	b, err := newBackend(testConfig(t), f.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = b.AbandonConfigure(ctx, "m1", backend.Placement{Zone: "z1", Domain: meta.DomainName(testConfig(t).Provider, "m1")})
	if !errors.Is(err, backend.ErrHostConnecting) {
		t.Fatalf("AbandonConfigure on a connecting host: %v, want ErrHostConnecting", err)
	}
}
