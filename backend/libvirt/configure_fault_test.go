package libvirt

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// agentOver makes the injector answer QemuAgentCommand with a fake qemu-ga
// (the test driver has none), so Configure and Drain run over the real
// transport: a domain lookup per command, then QemuAgentCommand. It
// records the commands in order.
func agentOver(f *faults, a *fakeAgent) *[]string {
	var mu sync.Mutex
	var cmds []string
	f.agent = func(_ string, cmd string) (string, error) {
		mu.Lock()
		_, rest, _ := strings.Cut(cmd, `"execute":"`)
		name, _, _ := strings.Cut(rest, `"`)
		cmds = append(cmds, name)
		mu.Unlock()
		out, err := a.Command(context.Background(), []byte(cmd), time.Second)
		return string(out), err
	}
	return &cmds
}

type agentStep struct {
	stepFault
	absorbed bool // the agent wait retries past it: the transition succeeds
}

// TestConfigureDrainFaultAtEveryStep: faults in the libvirt parts of
// Configure and Drain (the ownership read, the agent transport through
// withDomain, the metadata write after the hook). A failure names its step
// and cause and records no binding (Configure) or keeps it (Drain); a
// retry once the fault has passed succeeds. A fault while waiting for the
// agent is absorbed by the wait.
func TestConfigureDrainFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	configure := []agentStep{
		{stepFault{"configure: look up domain ", "conn.LookupDomainByName", "$dom", 1}, false},
		{stepFault{"configure: read metadata of ", "dom.GetMetadata", "$dom", 1}, false},
		{stepFault{"", "dom.QemuAgentCommand", "$dom", 1}, true}, // guest-ping while waiting for the agent
		{stepFault{"configure: record intent and fence marks: ", "conn.LookupDomainByName", "$dom", 2}, false},
		{stepFault{"", "conn.LookupDomainByName", "$dom", 3}, true}, // the transport's lookup for that ping
		{stepFault{"configure: write blob: ", "dom.QemuAgentCommand", "$dom", 4}, false},
		{stepFault{"configure: write blob: ", "conn.LookupDomainByName", "$dom", 6}, false},
		{stepFault{"configure: record intent and fence marks: ", "dom.SetMetadata", "$dom", 1}, false},
		{stepFault{"configure: record binding: ", "dom.SetMetadata", "$dom", 2}, false},
	}
	for _, s := range configure {
		for _, kind := range kindsFor(s.op) {
			t.Run(fmt.Sprintf("configure/%s#%d/%s", s.op, s.nth, kindName(kind)), func(t *testing.T) {
				t.Parallel()
				b, f, _ := newFaultBackend(t, nil, nil)
				cmds := agentOver(f, newFakeAgent())
				same := strangers(t, b)
				c := testConn(t, b, "z1")
				pl := mustCreate(t, b, "m1")
				cs := configureSpec(pl, "m1", "c1", []byte("blob"))
				r := f.add(s.rule(kind, pl.Domain))
				err := b.Configure(context.Background(), cs)
				if f.hits(r) != 1 {
					t.Fatalf("the fault did not fire (err %v, commands %q)", err, *cmds)
				}
				if s.absorbed {
					if err != nil {
						t.Fatalf("a fault while waiting for the agent failed the configure: %v", err)
					}
				} else if err == nil || !strings.HasPrefix(err.Error(), s.step) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("err = %v, want %q... with the injected cause", err, s.step)
				}
				if err != nil && kind != faultAfter {
					if md := readMD(t, c, pl.Domain); md.ClusterID != "" {
						t.Fatalf("a failed configure left a binding: %+v", md)
					}
				}
				f.clear()
				waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
				if err := b.Configure(context.Background(), cs); err != nil {
					t.Fatalf("retry after the fault: %v", err)
				}
				if md := readMD(t, c, pl.Domain); md.ClusterID != "c1" {
					t.Fatalf("binding after the retry: %+v", md)
				}
				same()
				onlyOurs(t, f, pl.Domain)
			})
		}
	}
	drain := []stepFault{
		{"drain: look up domain ", "conn.LookupDomainByName", "$dom", 1},
		{"drain: read metadata of ", "dom.GetMetadata", "$dom", 1},
		{"drain: clear binding: ", "dom.SetMetadata", "$dom", 1},
	}
	for _, s := range drain {
		for _, kind := range kindsFor(s.op) {
			t.Run("drain/"+s.op+"/"+kindName(kind), func(t *testing.T) {
				t.Parallel()
				b, f, _ := newFaultBackend(t, nil, nil)
				agentOver(f, newFakeAgent())
				c := testConn(t, b, "z1")
				pl := mustCreate(t, b, "m1")
				if err := b.Configure(context.Background(), configureSpec(pl, "m1", "c1", []byte("blob"))); err != nil {
					t.Fatal(err)
				}
				ds := backend.DrainSpec{MachineID: "m1", OperationID: "op-drain", Placement: pl, ClusterID: "c1", Grace: time.Second}
				r := f.add(s.rule(kind, pl.Domain))
				err := b.Drain(context.Background(), ds)
				if f.hits(r) != 1 || err == nil || !strings.HasPrefix(err.Error(), s.step) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("hits %d, err = %v, want %q with the injected cause", f.hits(r), err, s.step)
				}
				if md := readMD(t, c, pl.Domain); kind != faultAfter && md.ClusterID != "c1" {
					t.Fatalf("a failed drain dropped the binding: %+v", md)
				}
				f.clear()
				waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
				if err := b.Drain(context.Background(), ds); err != nil {
					t.Fatalf("retry after the fault: %v", err)
				}
				if md := readMD(t, c, pl.Domain); md.ClusterID != "" {
					t.Fatalf("binding after the retried drain: %+v", md)
				}
				onlyOurs(t, f, pl.Domain)
			})
		}
	}
}
