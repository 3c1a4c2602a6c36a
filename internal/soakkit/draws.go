package soakkit

import (
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// Draws is one fenced BigFleet client's sequence numbers (each newer than
// the last) and random source, shared by the goroutines that drive its
// machines.
type Draws struct {
	mu  sync.Mutex // guards seq, rng and n
	seq int64
	rng *rand.Rand
	n   int // Configures drawn, for cluster ids and metadata
}

// NewDraws draws from the PCG stream (seed, stream): a soak's seed replays
// each client's draws.
func NewDraws(seed, stream uint64) *Draws {
	return &Draws{rng: rand.New(rand.NewPCG(seed, stream))}
}

// Next is the next sequence number.
func (d *Draws) Next() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.seq
}

// Float is a uniform draw in [0, 1).
func (d *Draws) Float() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.Float64()
}

// Between is a uniform duration in [lo, hi].
func (d *Draws) Between(lo, hi time.Duration) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return lo + time.Duration(d.rng.Int64N(int64(hi-lo)+1))
}

// Configure counts one more Configure and draws its blob, 1 KiB plus up
// to extra random bytes, then runs more (if not nil) on the same source,
// all under one lock so that the draws of one Configure stay together.
func (d *Draws) Configure(extra int, more func(*rand.Rand)) (n int, blob []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	blob = make([]byte, 1024+d.rng.IntN(extra))
	for i := range blob {
		blob[i] = byte(d.rng.UintN(256))
	}
	if more != nil {
		more(d.rng)
	}
	return d.n, blob
}

// Request builds shard's mutation kind (Create, Configure, Drain or
// Delete) of machine id, given the token's sequence number of each
// attempt; b and blob are a Configure's, grace a Drain's.
func Request(shard string, epoch int64, id, kind string, b Binding, blob []byte, grace int64) func(seq int64) proto.Message {
	return func(seq int64) proto.Message {
		switch kind {
		case "Create":
			return &pb.CreateRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
		case "Configure":
			return &pb.ConfigureRequest{MachineId: id, ClusterId: b.Cluster, BootstrapBlob: blob,
				ShardMetadata: b.Meta, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
		case "Drain":
			return &pb.DrainRequest{MachineId: id, GracePeriodSeconds: grace, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
		}
		return &pb.DeleteRequest{MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}
	}
}
