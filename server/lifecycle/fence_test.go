package lifecycle

import (
	"math"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestFencing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	ctx := t.Context()
	create := func(id string, tk record.Token) error {
		_, err := f.e.Create(ctx, record.CreateRequest{MachineID: id, Token: tk})
		return err
	}

	// First contact is accepted and sets the mark.
	if err := create("m000", tok("s1", 2, 5)); err != nil {
		t.Fatal(err)
	}
	// Fence before idempotency: the same token again is stale, even though
	// the request would otherwise be a retry with a cached operation id.
	if err := create("m000", tok("s1", 2, 5)); codeOf(err) != record.CodeFenced {
		t.Fatalf("replay: %v", err)
	}
	if err := create("m000", tok("s1", 2, 4)); codeOf(err) != record.CodeFenced {
		t.Fatalf("older seq: %v", err)
	}
	if err := create("m000", tok("s1", 1, 99)); codeOf(err) != record.CodeFenced {
		t.Fatalf("older epoch: %v", err)
	}
	if err := create("m000", tok("s1", 3, 0)); err != nil {
		t.Fatalf("higher epoch, any sequence: %v", err)
	}
	// Per-machine isolation: m000's high mark does not fence m001.
	if err := create("m001", tok("s1", 1, 1)); err != nil {
		t.Fatalf("isolation: %v", err)
	}
	// Another shard has its own marks.
	if err := create("m000", tok("s2", 0, 1)); err != nil {
		t.Fatalf("other shard: %v", err)
	}
	// No token: no fencing.
	if err := create("m000", record.Token{}); err != nil {
		t.Fatalf("no token: %v", err)
	}
}

func TestFenceBeforeNotFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := t.Context()
	_, err := f.e.Delete(ctx, record.DeleteRequest{MachineID: "ghost", Token: tok("s", 5, 5)})
	if codeOf(err) != record.CodeNotFound {
		t.Fatalf("first contact on unknown id: %v", err)
	}
	_, err = f.e.Delete(ctx, record.DeleteRequest{MachineID: "ghost", Token: tok("s", 5, 5)})
	if codeOf(err) != record.CodeFenced {
		t.Fatalf("stale token on unknown id must be fenced first: %v", err)
	}
}

func TestMarkAdvancesWhenOperationFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := t.Context()
	_, err := f.e.Drain(ctx, record.DrainRequest{MachineID: "m000", Token: tok("s", 1, 1)})
	if codeOf(err) != record.CodeAborted {
		t.Fatalf("drain on SPECULATIVE: %v", err)
	}
	_, err = f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", 1, 1)})
	if codeOf(err) != record.CodeFenced {
		t.Fatalf("the aborted call's token must have advanced the mark: %v", err)
	}
}

func TestInt64MaxTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	ctx := t.Context()
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", math.MaxInt64, math.MaxInt64-1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", math.MaxInt64, math.MaxInt64)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", math.MaxInt64, math.MaxInt64)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("max replay: %v", err)
	}
	if _, err := f.e.Create(ctx, record.CreateRequest{MachineID: "m000", Token: tok("s", 0, math.MaxInt64)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("lower epoch with max seq: %v", err)
	}
}

func TestMarksSurviveRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok("s", 3, 3)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("m000", record.Idle)
	f.e.Close()
	f.start(1)
	if _, err := f.e.Create(t.Context(), record.CreateRequest{MachineID: "m000", Token: tok("s", 3, 3)}); codeOf(err) != record.CodeFenced {
		t.Fatalf("after restart: %v", err)
	}
}
