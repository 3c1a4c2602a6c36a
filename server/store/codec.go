package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Encoding of fence marks, and the checks every batch passes before either
// store accepts it. Machine records are encoded in record.go.

const markValueLen = 16

// markKey is uvarint(len(shardID)) + shardID + machineID: the length
// prefix keeps the key injective whatever bytes the ids hold (a proto
// string may carry NUL).
func markKey(k record.MarkKey) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(k.ShardID)+len(k.MachineID))
	b = binary.AppendUvarint(b, uint64(len(k.ShardID)))
	b = append(b, k.ShardID...)
	return append(b, k.MachineID...)
}

func parseMarkKey(b []byte) (record.MarkKey, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return record.MarkKey{}, fmt.Errorf("store: corrupt mark key %q", b)
	}
	rest := b[w:]
	return record.MarkKey{ShardID: string(rest[:n]), MachineID: string(rest[n:])}, nil
}

// markValue is epoch then sequence, 8 bytes each, big-endian two's
// complement: any int64 (negative parts are ordinary values by contract)
// round-trips through the uint64 cast.
func markValue(m record.Mark) []byte {
	b := make([]byte, markValueLen)
	binary.BigEndian.PutUint64(b[0:8], uint64(m.Epoch))
	binary.BigEndian.PutUint64(b[8:16], uint64(m.Sequence))
	return b
}

func parseMarkValue(b []byte) (record.Mark, error) {
	if len(b) != markValueLen {
		return record.Mark{}, fmt.Errorf("store: corrupt mark value of %d bytes", len(b))
	}
	return record.Mark{
		Epoch:    int64(binary.BigEndian.Uint64(b[0:8])),
		Sequence: int64(binary.BigEndian.Uint64(b[8:16])),
	}, nil
}

// validate rejects what the file cannot represent faithfully, before the
// batch joins a group commit, so one bad batch cannot fail its neighbours.
// Both stores apply it, so behaviour does not depend on --state. A key over
// bbolt's limit is record.ErrTooLarge: the request's fault, not an outage.
func validate(b record.Batch) error {
	for i := range b.Machines {
		switch id := b.Machines[i].ID; {
		case id == "":
			return errors.New("store: machine with empty id")
		case len(id) > bolt.MaxKeySize:
			return fmt.Errorf("store: machine id is %d bytes; the store's key limit is %d: %w",
				len(id), bolt.MaxKeySize, record.ErrTooLarge)
		}
	}
	for k := range b.Marks {
		if n := markKeyLen(k); n > bolt.MaxKeySize {
			return fmt.Errorf("store: fence mark key is %d bytes (shard_id %d, machine id %d); the store's key limit is %d: %w",
				n, len(k.ShardID), len(k.MachineID), bolt.MaxKeySize, record.ErrTooLarge)
		}
	}
	return nil
}

// markKeyLen is len(markKey(k)), without building it.
func markKeyLen(k record.MarkKey) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(len(k.ShardID))) + len(k.ShardID) + len(k.MachineID)
}

// putErr describes a failed Put by what and how large, never quoting a
// key that may be tens of kilobytes; bbolt's own size limits are
// classified record.ErrTooLarge.
func putErr(what string, k, v []byte, err error) error {
	if errors.Is(err, bolt.ErrKeyTooLarge) || errors.Is(err, bolt.ErrValueTooLarge) {
		return fmt.Errorf("put %s: key %d bytes (limit %d), value %d bytes (limit %d): %w: %w",
			what, len(k), bolt.MaxKeySize, len(v), bolt.MaxValueSize, err, record.ErrTooLarge)
	}
	return fmt.Errorf("put %s %s: %w", what, clip(string(k)), err)
}

// clip quotes s for a message, cut short if long.
func clip(s string) string {
	if len(s) <= 256 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:64]), len(s))
}

// newStoreID returns a random non-zero id; zero is left to mean "no store"
// in cursors.
func newStoreID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand panics instead)
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
