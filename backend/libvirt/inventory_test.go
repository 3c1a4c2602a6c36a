package libvirt

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
)

func TestInventoryListsOnlyOurs(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, nil)
	withFakeAgent(b)
	ctx := context.Background()
	c := testConn(t, b, "z1")
	pl1 := mustCreate(t, b, "m1")
	pl2 := mustCreate(t, b, "m2")
	cs := configureSpec(pl2, "m2", "c1", []byte("blob"))
	if err := b.Configure(ctx, cs); err != nil {
		t.Fatal(err)
	}
	// Destroyed behind our back: still listed, not running.
	if err := onDomain(lvc(c), pl1.Domain, domstate.Destroy); err != nil {
		t.Fatal(err)
	}
	// Strangers, including ones wearing our name prefix.
	defineStranger(t, c, meta.DomainName(b.cfg.Provider, "no-meta"), nil)
	defineStranger(t, c, meta.DomainName(b.cfg.Provider, "other"), &meta.Metadata{Provider: "other-provider", MachineID: "other"})
	defineStranger(t, c, meta.DomainName("other-provider", "x"), &meta.Metadata{Provider: "other-provider", MachineID: "x"})
	defineStranger(t, c, "unrelated-vm", nil)

	inv := b.Inventory(ctx)
	if len(inv) != 1 || inv[0].Zone != "z1" || inv[0].Err != nil {
		t.Fatalf("inventory %+v", inv)
	}
	ms := inv[0].Machines
	sort.Slice(ms, func(i, j int) bool { return ms[i].MachineID < ms[j].MachineID })
	if len(ms) != 2 || ms[0].MachineID != "m1" || ms[1].MachineID != "m2" {
		t.Fatalf("machines %+v", ms)
	}
	if ms[0].Running || ms[0].Placement != pl1 || ms[0].OperationID != "op-m1" || ms[0].ClusterID != "" {
		t.Errorf("m1 %+v", ms[0])
	}
	if !ms[1].Running || ms[1].Placement != pl2 || ms[1].ClusterID != "c1" || ms[1].ShardMetadata["ctl"] != "a\x01b" ||
		ms[1].OperationID != cs.OperationID {
		t.Errorf("m2 %+v", ms[1])
	}
}

func TestHostsReportsEachHost(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "down", URI: "qemu+unix:///system?socket=/nonexistent/bf.sock"})
	})
	mustCreate(t, b, "m1")
	hs := b.Hosts(context.Background())
	if len(hs) != 2 || hs[0].Zone != "z1" || hs[1].Zone != "down" {
		t.Fatalf("hosts %+v", hs)
	}
	up, down := hs[0], hs[1]
	if !up.Connected || up.LibvirtVersion == "" || up.HypervisorVersion == "" || up.PoolCapacity != 100<<30 ||
		up.PoolAllocation == 0 || up.DomainCount != 1 || up.LastError != "" {
		t.Errorf("up host %+v", up)
	}
	if down.Connected || down.URI != "qemu+unix:///system" || down.LastError == "" {
		t.Errorf("down host %+v", down)
	}
}

func TestPerHostTimeoutDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	b, _ := newTestBackend(t, func(c *Config) {
		c.Hosts = append(c.Hosts, Host{Zone: "slow", URI: nodeURI(t)})
		c.InventoryTimeout = 100 * time.Millisecond
	})
	block := make(chan struct{})
	defer close(block)
	start := time.Now()
	res := perHost(context.Background(), b, b.cfg.InventoryTimeout, func(h *host) error {
		if h.zone == "slow" {
			<-block
		}
		return nil
	}, func(_ *host, err error) error { return err })
	if time.Since(start) > 2*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
	if res[0] != nil || !errors.Is(res[1], backend.ErrHostUnavailable) {
		t.Fatalf("results %v", res)
	}
}
