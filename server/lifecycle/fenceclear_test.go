package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// clearingBackend records ClearMark calls and can refuse them.
type clearingBackend struct {
	*testBackend
	mu      sync.Mutex
	cleared []string // machine/shard
	fail    error
}

func (b *clearingBackend) ClearMark(_ context.Context, id string, _ backend.Placement, shard string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return b.fail
	}
	b.cleared = append(b.cleared, id+"/"+shard)
	return nil
}

// TestClearMark: the operator's clear removes a shard's durable mark
// from the host's metadata, the store and the engine, with a history
// entry, and frees a slot of the bound; a host that refuses it, a
// machine in a transition, an unknown shard or machine change nothing.
func TestClearMark(t *testing.T) {
	t.Parallel()
	cb := &clearingBackend{}
	f := &fixture{t: t, st: newMemStore(), be: newTestBackend()}
	cb.testBackend = f.be
	f.wrap = cb
	limit := func(c *Config) { c.ShardsPerMachine = 2 }
	f.start(1, limit)
	ctx := t.Context()
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("a", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Idle)
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("b", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c", Token: tok("late", 1, 1)}); codeOf(err) != record.CodeExhausted {
		t.Fatalf("a third shard at a bound of 2: %v", err)
	}

	cb.fail = errors.New("host unreachable")
	if _, err := f.e.ClearMark(ctx, "m000", "a", "ops"); codeOf(err) != record.CodeUnavailable || storedMarks(f, "m000") != 2 {
		t.Fatalf("clear with the host refusing: %v, %d marks stored; want Unavailable, 2", err, storedMarks(f, "m000"))
	}
	cb.fail = nil
	for _, bad := range []struct{ id, shard string }{{"m000", "nobody"}, {"ghost", "a"}, {"m000", ""}, {"", "a"}} {
		if _, err := f.e.ClearMark(ctx, bad.id, bad.shard, "ops"); err == nil {
			t.Errorf("clear of %q on %q succeeded", bad.shard, bad.id)
		}
	}
	c, err := f.e.ClearMark(ctx, "m000", "a", "ops")
	if err != nil {
		t.Fatal(err)
	}
	if c.Mark != (record.Mark{Epoch: 1, Sequence: 1}) || c.ShardsLeft != 1 || storedMarks(f, "m000") != 1 ||
		len(cb.cleared) != 1 || cb.cleared[0] != "m000/a" {
		t.Errorf("clear = %+v, %d stored, host calls %v", c, storedMarks(f, "m000"), cb.cleared)
	}
	h := c.Machine.History[len(c.Machine.History)-1]
	if h.Kind != record.OpFenceClear || h.From != record.Idle || h.To != record.Idle || !strings.Contains(h.Note, `"a"`) || !strings.Contains(h.Note, "ops") {
		t.Errorf("history entry = %+v", h)
	}
	// The slot is free: the refused shard acts; the cleared one is a
	// first contact again (its old token passes).
	if _, err := f.e.Configure(ctx, record.ConfigureRequest{MachineID: "m000", ClusterID: "c", Token: tok("late", 1, 1)}); err != nil {
		t.Fatalf("the refused shard after the clear: %v", err)
	}
	if _, err := f.e.ClearMark(ctx, "m000", "b", "ops"); codeOf(err) != record.CodeAborted {
		t.Errorf("clear while CONFIGURING: %v; want Aborted", err)
	}
	f.waitState("m000", record.Configured)
	// The clear is durable: a restart does not bring the mark back.
	f.e.Close()
	f.start(1, limit)
	if _, ok := f.e.Marks()[record.MarkKey{ShardID: "a", MachineID: "m000"}]; ok {
		t.Error("the cleared mark is back after a restart")
	}
}
