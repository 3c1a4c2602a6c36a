package lifecycle

import (
	"cmp"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fenceModel is an independent model of the contract's fencing section,
// written from the text, not from fence.go: marks per (shard, machine),
// lexicographic comparison, the fence before any check of the token's own
// values, and negative parts as ordinary int64 values (CONTRACT.md:
// (22,-1) after (21,1) is newer and accepted).
type fenceModel struct {
	marks map[[2]string][2]int64
	// durable are the marks a restart keeps: those of an existing machine
	// whose shard had a call accepted there (a newcomer's refused call
	// leaves its mark in memory only, issue 39).
	durable map[[2]string]bool
}

// outcome records whether the engine accepted the call the model judged.
func (m *fenceModel) outcome(id string, t record.Token, known, accepted bool) {
	if t.ShardID != "" && known && accepted {
		m.durable[[2]string{t.ShardID, id}] = true
	}
}

type verdict int

const (
	vOther  verdict = iota // neither fenced nor invalid
	vFenced                // FailedPrecondition
)

func (m *fenceModel) call(id string, t record.Token) verdict {
	if t.ShardID == "" && t.Epoch == 0 && t.Sequence == 0 {
		return vOther
	}
	k := [2]string{t.ShardID, id}
	if mark, ok := m.marks[k]; ok {
		c := cmp.Compare(t.Epoch, mark[0])
		if c == 0 {
			c = cmp.Compare(t.Sequence, mark[1])
		}
		if c <= 0 {
			return vFenced
		}
	}
	m.marks[k] = [2]int64{t.Epoch, t.Sequence}
	return vOther
}

// restart forgets what the provider keeps only in memory: marks for machine
// ids that do not exist, and newcomers' marks from refused calls.
func (m *fenceModel) restart(known map[string]bool) {
	for k := range m.marks {
		if !known[k[1]] || !m.durable[k] {
			delete(m.marks, k)
		}
	}
}

// part draws a token part: mostly next to the current mark (where the
// comparison's edges are), else small values incl. negatives, rarely the
// int64 extremes (which saturate a mark, so they must stay rare).
func part(rng *rand.Rand, near int64, has bool) int64 {
	switch r := rng.IntN(200); {
	case r < 1:
		return math.MaxInt64 - int64(rng.IntN(2))
	case r < 2:
		return math.MinInt64
	case r < 120 && has:
		d := int64(rng.IntN(3) - 1)
		if (d > 0 && near == math.MaxInt64) || (d < 0 && near == math.MinInt64) {
			d = 0
		}
		return near + d
	default:
		return int64(rng.IntN(7) - 2)
	}
}

// TestFenceAgainstModel drives the engine with random token sequences and
// checks each answer against fenceModel. Reproduce a failure with
// FENCE_SEED=<seed printed in the failure>.
func TestFenceAgainstModel(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	if s := os.Getenv("FENCE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("FENCE_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	f := newFixture(t, 3)
	known := map[string]bool{"m000": true, "m001": true, "m002": true}
	ids := []string{"m000", "m001", "m002", "ghost-a", "ghost-b"}
	shards := []string{"s1", "s2", "s3"}
	model := &fenceModel{marks: map[[2]string][2]int64{}, durable: map[[2]string]bool{}}
	counts := map[verdict]int{}
	negative := map[verdict]int{} // tokens with a negative part, by verdict
	maxPassed := 0

	for step := range 4000 {
		if rng.IntN(1000) == 0 {
			f.e.Close()
			f.start(3)
			model.restart(known)
		}
		id := ids[rng.IntN(len(ids))]
		var tk record.Token
		if rng.IntN(8) > 0 {
			shard := shards[rng.IntN(len(shards))]
			mark, has := model.marks[[2]string{shard, id}]
			tk = tok(shard, part(rng, mark[0], has), part(rng, mark[1], has))
		}
		want := model.call(id, tk)
		counts[want]++
		if want == vOther && (tk.Epoch == math.MaxInt64 || tk.Sequence == math.MaxInt64) {
			maxPassed++
		}
		if tk.ShardID != "" && (tk.Epoch < 0 || tk.Sequence < 0) {
			negative[want]++
		}
		var err error
		switch rng.IntN(3) {
		case 0:
			_, err = f.e.Create(t.Context(), record.CreateRequest{MachineID: id, Token: tk})
		case 1:
			_, err = f.e.Drain(t.Context(), record.DrainRequest{MachineID: id, Token: tk})
		case 2:
			_, err = f.e.Delete(t.Context(), record.DeleteRequest{MachineID: id, Token: tk})
		}
		model.outcome(id, tk, known[id], err == nil)
		got := codeOf(err)
		bad := false
		switch want {
		case vFenced:
			bad = got != record.CodeFenced
		case vOther:
			bad = got == record.CodeFenced || got == record.CodeInvalid
		}
		if bad {
			t.Fatalf("FENCE_SEED=%d step %d: %s %+v: engine %v (code %d), model says %v",
				seed, step, id, tk, err, got, []string{"neither fenced nor invalid", "FailedPrecondition"}[want])
		}
	}
	t.Logf("verdicts (other, fenced): %d %d; with a negative part: %d passed, %d fenced; passing tokens with an int64-max part: %d",
		counts[vOther], counts[vFenced], negative[vOther], negative[vFenced], maxPassed)
	// The sequence must have exercised both verdicts, with and without a
	// negative part, or it proved little. Nothing is ever InvalidArgument.
	for v := vOther; v <= vFenced; v++ {
		if counts[v] < 25 || negative[v] < 25 {
			t.Fatalf("FENCE_SEED=%d: only %d calls (%d with a negative part) of verdict %d", seed, counts[v], negative[v], v)
		}
	}
}
