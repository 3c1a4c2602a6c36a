package store

import (
	"encoding/binary"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"

	storev1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/store/v1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// offering is the part of a machine record that every slot of one capacity
// offering shares. A 100k-slot fleet has a handful of distinct ones, so each
// is stored once (offerings bucket: id -> encoding) and records carry its
// id: the bulk of a JSON record (its three maps and the type, zone, price)
// becomes one or two bytes. Decoding an offering once per Load also makes
// its maps shared by all its records, which is the interning the engine
// wants for memory anyway.
type offering struct {
	InstanceType            string
	Zone                    string
	CapacityType            record.CapacityType
	PricePerHour            float64
	InterruptionProbability float64
	Resources               map[string]string
	Allocatable             map[string]string
	Labels                  map[string]string
	VCPU                    int
	MemoryMiB               int
}

// encodeOffering is the canonical encoding of m's offering part (format
// byte, then a storev1.Offering with its maps in key order), so equal
// parts have equal bytes. An empty part encodes to the
// format byte alone.
func encodeOffering(m *record.Machine) []byte {
	return marshal(&storev1.Offering{
		InstanceType:            m.InstanceType,
		Zone:                    m.Zone,
		CapacityType:            int64(m.CapacityType),
		PricePerHour:            m.PricePerHour,
		InterruptionProbability: m.InterruptionProbability,
		Resources:               toEntries(m.Resources),
		Allocatable:             toEntries(m.Allocatable),
		Labels:                  toEntries(m.Labels),
		Vcpu:                    int64(m.VCPU),
		MemoryMib:               int64(m.MemoryMiB),
	})
}

func decodeOffering(v []byte) (*offering, error) {
	if len(v) == 0 || v[0] != formatBinaryV1 {
		return nil, fmt.Errorf("unknown offering format %x", v[:min(len(v), 1)])
	}
	var p storev1.Offering
	if err := unmarshal(v[1:], &p); err != nil {
		return nil, err
	}
	o := &offering{
		InstanceType:            p.InstanceType,
		Zone:                    p.Zone,
		CapacityType:            record.CapacityType(p.CapacityType),
		PricePerHour:            p.PricePerHour,
		InterruptionProbability: p.InterruptionProbability,
		VCPU:                    int(p.Vcpu),
		MemoryMiB:               int(p.MemoryMib),
	}
	var err error
	for _, f := range []struct {
		name string
		to   *map[string]string
		from []*storev1.Entry
	}{{"resources", &o.Resources, p.Resources}, {"allocatable", &o.Allocatable, p.Allocatable}, {"labels", &o.Labels, p.Labels}} {
		if *f.to, err = fromEntries(f.from); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return o, nil
}

// apply sets m's offering part. The maps are shared with every record of
// the offering (records never write into their maps; see lifecycle).
func (o *offering) apply(m *record.Machine) {
	m.InstanceType, m.Zone, m.CapacityType = o.InstanceType, o.Zone, o.CapacityType
	m.PricePerHour, m.InterruptionProbability = o.PricePerHour, o.InterruptionProbability
	m.Resources, m.Allocatable, m.Labels = o.Resources, o.Allocatable, o.Labels
	m.VCPU, m.MemoryMiB = o.VCPU, o.MemoryMiB
}

// offeringKey is an offering id as its bucket key: 8 bytes big-endian.
func offeringKey(id uint64) []byte { return be64(id) }

// readOfferings decodes the offerings bucket of tx.
func readOfferings(tx *bolt.Tx) (map[uint64]*offering, error) {
	out := make(map[uint64]*offering)
	b := tx.Bucket(bucketOfferings)
	if b == nil {
		return out, nil // a schema 1 file opened read-only has none yet
	}
	err := b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("corrupt offering key %x", k)
		}
		o, err := decodeOffering(v)
		if err != nil {
			return fmt.Errorf("offering %d: %w", binary.BigEndian.Uint64(k), err)
		}
		out[binary.BigEndian.Uint64(k)] = o
		return nil
	})
	return out, err
}

// offeringTable gives offering encodings their ids for one open file. An
// id is assigned in memory when an encoding is first seen, and written to
// the file in the same transaction as the first record that refers to it
// (every request carries the entries not yet known durable; Put is
// idempotent). It is marked durable only once such a transaction has
// committed, so no record can ever be durable without its offering.
type offeringTable struct {
	mu      sync.Mutex
	byBytes map[string]*offeringEntry
	byID    map[uint64]*offeringEntry
	last    uint64
}

type offeringEntry struct {
	id      uint64
	enc     string
	durable bool
}

func newOfferingTable() *offeringTable {
	return &offeringTable{byBytes: make(map[string]*offeringEntry), byID: make(map[uint64]*offeringEntry)}
}

// load fills the table from the file's offerings bucket (all durable).
func (t *offeringTable) load(tx *bolt.Tx) error {
	return tx.Bucket(bucketOfferings).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("corrupt offering key %x", k)
		}
		e := &offeringEntry{id: binary.BigEndian.Uint64(k), enc: string(v), durable: true}
		t.byBytes[e.enc], t.byID[e.id] = e, e
		t.last = max(t.last, e.id)
		return nil
	})
}

// ref returns the id of an offering encoding and whether the caller's
// transaction must write it (not durable yet). An empty encoding is id 0,
// never stored.
func (t *offeringTable) ref(enc []byte) (id uint64, write bool) {
	if len(enc) == 1 {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byBytes[string(enc)]
	if !ok {
		t.last++
		e = &offeringEntry{id: t.last, enc: string(enc)}
		t.byBytes[e.enc], t.byID[e.id] = e, e
	}
	return e.id, !e.durable
}

// entry returns the key and value to write for id.
func (t *offeringTable) entry(id uint64) kv {
	t.mu.Lock()
	defer t.mu.Unlock()
	return kv{offeringKey(id), []byte(t.byID[id].enc)}
}

// committed marks ids durable after their transaction committed.
func (t *offeringTable) committed(ids []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.byID[id].durable = true
	}
}
