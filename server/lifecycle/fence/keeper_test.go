package fence

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fakeMachines is the engine as the Keeper sees it: a set of ids, a lock
// that records who held it, and a commit that can fail.
type fakeMachines struct {
	known     map[string]bool
	locked    []string
	commitErr error
	commits   []record.Batch
	mu        sync.Mutex
}

func (f *fakeMachines) Known(id string) bool { return f.known[id] }
func (f *fakeMachines) Lock(id string) func() {
	f.mu.Lock()
	f.locked = append(f.locked, id)
	return f.mu.Unlock
}
func (f *fakeMachines) Commit(_ context.Context, b record.Batch) error {
	if f.commitErr != nil {
		return f.commitErr
	}
	f.commits = append(f.commits, b)
	return nil
}

func tok(shard string, epoch, seq int64) record.Token {
	return record.Token{ShardID: shard, Epoch: epoch, Sequence: seq}
}

func code(err *record.Error) record.Code {
	if err == nil {
		return 0
	}
	return err.Code
}

// Check answers in the contract's order: the fence before the token's own
// values, a newcomer at the shard limit refused and counted, and a known
// shard never counted against the limit.
func TestKeeperCheck(t *testing.T) {
	t.Parallel()
	loaded := map[MarkKey]Mark{
		{ShardID: "a", MachineID: "m"}: {Epoch: 2, Sequence: 5},
		{ShardID: "b", MachineID: "m"}: {Epoch: 1, Sequence: 1},
	}
	k := NewKeeper(loaded, 2, 0, &fakeMachines{known: map[string]bool{"m": true}}, slog.New(slog.DiscardHandler))

	if _, _, err := k.Check("m", tok("a", 2, 5), true); code(err) != record.CodeFenced {
		t.Fatalf("replay of the mark: %v, want CodeFenced", err)
	}
	long := tok(strings.Repeat("x", record.MaxShardIDBytes+1), 1, 1)
	k.Set("m", long.ShardID, Mark{Epoch: 9, Sequence: 9})
	if _, _, err := k.Check("m", long, true); code(err) != record.CodeFenced {
		t.Fatalf("stale token with an over-long shard id: %v, want CodeFenced before InvalidArgument", err)
	}
	k.Drop(MarkKey{ShardID: long.ShardID, MachineID: "m"})
	mark, newcomer, err := k.Check("m", tok("a", 2, 6), true)
	if err != nil || newcomer || *mark != (Mark{Epoch: 2, Sequence: 6}) {
		t.Fatalf("newer token of a known shard: %v %v %v", mark, newcomer, err)
	}
	if _, _, err := k.Check("m", tok("c", 1, 1), true); code(err) != record.CodeExhausted {
		t.Fatalf("third shard on a machine with a limit of 2: %v, want CodeExhausted", err)
	}
	if limit, refused := k.Limit(); limit != 2 || refused != 1 {
		t.Fatalf("Limit() = %d, %d; want 2, 1", limit, refused)
	}
	if _, _, err := k.Check("gone", tok("c", 1, 1), false); err != nil {
		t.Fatalf("an unknown id is not bound by the limit: %v", err)
	}
}

// Keep: a newcomer whose call is refused leaves its mark in memory only
// (still fenced, not durable, not counted); any other outcome commits it.
func TestKeeperKeep(t *testing.T) {
	t.Parallel()
	k := NewKeeper(nil, 0, 0, &fakeMachines{known: map[string]bool{"m": true}}, slog.New(slog.DiscardHandler))
	mark, newcomer, err := k.Check("m", tok("n", 3, 3), true)
	if err != nil || !newcomer {
		t.Fatalf("first contact: newcomer=%v err=%v", newcomer, err)
	}
	if got := k.Keep("m", tok("n", 3, 3), mark, newcomer, true); got != nil {
		t.Fatalf("refused newcomer: Keep returned %v to commit, want nil", got)
	}
	if k.ShardsOn("m") != 0 || k.UnknownLen() != 1 {
		t.Fatalf("refused newcomer: %d durable shards, %d in memory; want 0, 1", k.ShardsOn("m"), k.UnknownLen())
	}
	if _, _, err := k.Check("m", tok("n", 3, 3), true); code(err) != record.CodeFenced {
		t.Fatalf("replay after a refused first call: %v, want CodeFenced", err)
	}
	mark, newcomer, _ = k.Check("m", tok("n", 3, 4), true)
	if got := k.Keep("m", tok("n", 3, 4), mark, newcomer, false); got == nil {
		t.Fatal("accepted newcomer: Keep returned nil, want its mark to commit")
	}
	k.Set("m", "n", *mark)
	if k.ShardsOn("m") != 1 || k.UnknownLen() != 0 {
		t.Fatalf("after Set: %d durable shards, %d in memory; want 1, 0", k.ShardsOn("m"), k.UnknownLen())
	}
}

// Restore raises marks to newer recorded ones under the machine's lock,
// never lowers one, ignores unknown ids and failed listings, and raises
// nothing when the commit fails.
func TestKeeperRestore(t *testing.T) {
	t.Parallel()
	ms := &fakeMachines{known: map[string]bool{"m": true}}
	k := NewKeeper(map[MarkKey]Mark{{ShardID: "a", MachineID: "m"}: {Epoch: 5, Sequence: 0}}, 0, 0, ms, slog.New(slog.DiscardHandler))
	zi := backend.ZoneInventory{Machines: []backend.Observed{
		{MachineID: "m", Marks: map[string]backend.FenceMark{"a": {Epoch: 4}, "b": {Epoch: 7, Sequence: 1}}},
		{MachineID: "unknown", Marks: map[string]backend.FenceMark{"a": {Epoch: 9}}},
	}}
	if n := k.Restore(context.Background(), backend.ZoneInventory{Err: errors.New("down"), Machines: zi.Machines}); n != 0 {
		t.Fatalf("failed listing raised %d marks", n)
	}
	ms.commitErr = errors.New("store down")
	if n := k.Restore(context.Background(), zi); n != 0 || k.ShardsOn("m") != 1 {
		t.Fatalf("failed commit: raised %d, %d shards; want 0, 1", n, k.ShardsOn("m"))
	}
	ms.commitErr = nil
	if n := k.Restore(context.Background(), zi); n != 1 {
		t.Fatalf("raised %d marks, want 1 (b only)", n)
	}
	if m, _ := k.Durable(MarkKey{ShardID: "a", MachineID: "m"}); m.Epoch != 5 {
		t.Fatalf("mark a lowered to %v", m)
	}
	if m, ok := k.Durable(MarkKey{ShardID: "b", MachineID: "m"}); !ok || m != (Mark{Epoch: 7, Sequence: 1}) {
		t.Fatalf("mark b = %v %v, want the recorded one", m, ok)
	}
	if len(ms.commits) != 1 || len(ms.commits[0].Marks) != 1 {
		t.Fatalf("commits = %v, want one of mark b", ms.commits)
	}
	for _, id := range ms.locked {
		if id != "m" {
			t.Fatalf("locked %q: an unknown id is never locked", id)
		}
	}
	if len(ms.locked) == 0 {
		t.Fatal("raised without the machine's lock")
	}
}
