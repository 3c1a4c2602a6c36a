package store

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/store/v1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// A machine record's value starts with a format byte:
//
//	'{'  schema 1: JSON of record.Machine (read only; rewritten as v1
//	     when the record is next written, or by Compact)
//	0x01 binary v1: protobuf wire fields below
//
// A new format gets a new byte; readers sniff it, so files that mix formats
// (a partly migrated file) load record by record.
const (
	formatJSON     = '{'
	formatBinaryV1 = 0x01
)

// Binary v1 is a storev1.Record (proto/libvirtprovider/store/v1): the id
// is the record's key and is not repeated in the value; what a capacity
// offering's slots share (type, zone, price, resources, allocatable,
// labels, hardware) is stored once in the offerings bucket and referenced
// by id (offering.go). Maps are written in key order (entries.go), which
// is what the hand-written codec before it wrote, byte for byte
// (testdata/golden).

// encodeRecord is m's value in binary v1, with its offering part replaced
// by the reference off (0: the offering part is empty).
func encodeRecord(m *record.Machine, off uint64) []byte {
	times := newTimeBuf(2 + 2*len(m.History))
	r := &storev1.Record{
		State:         int64(m.State),
		HostProvider:  m.Host.Provider,
		HostRef:       m.Host.Ref,
		Offering:      off,
		LastError:     m.LastError,
		Cluster:       m.Cluster,
		ShardMetadata: toEntries(m.ShardMetadata),
		Domain:        m.Domain,
		HostName:      m.HostName,
		OperationId:   m.OperationID,
		OpKind:        string(m.OpKind),
		OpDeadline:    times.encode(m.OpDeadline),
		DrainGrace:    m.DrainGrace,
		StateSince:    times.encode(m.StateSince),
		Revision:      m.Revision,
	}
	if len(m.History) > 0 {
		r.History = make([]*storev1.Transition, len(m.History))
		hist := make([]storev1.Transition, len(m.History))
		for i := range m.History {
			t := &m.History[i]
			hist[i] = storev1.Transition{
				OperationId: t.OperationID, Kind: string(t.Kind),
				From: int64(t.From), To: int64(t.To),
				Started: times.encode(t.Started), Ended: times.encode(t.Ended),
				Outcome: t.Outcome, LastError: t.LastError, Note: t.Note,
			}
			r.History[i] = &hist[i]
		}
	}
	return marshal(r)
}

// marshal is the format byte then msg. Marshalling a message of this
// package cannot fail (no required fields, no UTF-8 checks).
func marshal(msg proto.Message) []byte {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{formatBinaryV1}, msg)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %T: %v", msg, err))
	}
	return b
}

// offeringLookup resolves an offering reference of a record.
type offeringLookup func(id uint64) (*offering, bool)

// decodeMachine decodes a record of any known format. k is its key (the
// machine id); v may point into bbolt's mmap: nothing returned aliases it.
func decodeMachine(k, v []byte, offerings offeringLookup) (record.Machine, error) {
	var m record.Machine
	if len(v) == 0 {
		return m, fmt.Errorf("store: machine %s: empty record", clip(string(k)))
	}
	switch v[0] {
	case formatJSON:
		if err := json.Unmarshal(v, &m); err != nil {
			return m, fmt.Errorf("store: decode machine %s (JSON record): %w", clip(string(k)), err)
		}
		return m, nil
	case formatBinaryV1:
		if err := decodeRecordV1(&m, v[1:], offerings); err != nil {
			return m, fmt.Errorf("store: decode machine %s: %w", clip(string(k)), err)
		}
		m.ID = string(k)
		return m, nil
	}
	return m, fmt.Errorf("store: machine %s: unknown record format 0x%02x (written by a newer version?)", clip(string(k)), v[0])
}

func decodeRecordV1(m *record.Machine, v []byte, offerings offeringLookup) error {
	var r storev1.Record
	if err := unmarshal(v, &r); err != nil {
		return err
	}
	var err error
	m.State = record.State(r.State)
	m.Host = record.HostRef{Provider: r.HostProvider, Ref: r.HostRef}
	if r.Offering != 0 {
		o, ok := offerings(r.Offering)
		if !ok {
			return fmt.Errorf("offering %d is not in the file", r.Offering)
		}
		o.apply(m)
	}
	m.LastError, m.Cluster = r.LastError, r.Cluster
	if m.ShardMetadata, err = fromEntries(r.ShardMetadata); err != nil {
		return fmt.Errorf("shard_metadata: %w", err)
	}
	m.Domain, m.HostName, m.OperationID, m.OpKind = r.Domain, r.HostName, r.OperationId, record.OpKind(r.OpKind)
	if m.OpDeadline, err = decodeTime(r.OpDeadline); err != nil {
		return fmt.Errorf("op_deadline: %w", err)
	}
	m.DrainGrace, m.Revision = r.DrainGrace, r.Revision
	if m.StateSince, err = decodeTime(r.StateSince); err != nil {
		return fmt.Errorf("state_since: %w", err)
	}
	if len(r.History) > 0 {
		m.History = make([]record.Transition, len(r.History))
	}
	for i, t := range r.History {
		if err := decodeTransition(&m.History[i], t); err != nil {
			return fmt.Errorf("history entry %d: %w", i, err)
		}
	}
	return nil
}

func decodeTransition(out *record.Transition, t *storev1.Transition) error {
	if err := refuseUnknown(t); err != nil {
		return err
	}
	var err error
	*out = record.Transition{OperationID: t.OperationId, Kind: record.OpKind(t.Kind),
		From: record.State(t.From), To: record.State(t.To),
		Outcome: t.Outcome, LastError: t.LastError, Note: t.Note}
	if out.Started, err = decodeTime(t.Started); err != nil {
		return fmt.Errorf("started: %w", err)
	}
	if out.Ended, err = decodeTime(t.Ended); err != nil {
		return fmt.Errorf("ended: %w", err)
	}
	return nil
}

// unmarshal decodes v into msg and refuses unknown fields. Strings and
// bytes are copied: v may be bbolt's mmap, valid only in its transaction.
func unmarshal(v []byte, msg proto.Message) error {
	if err := proto.Unmarshal(v, msg); err != nil {
		return err
	}
	return refuseUnknown(msg)
}

// refuseUnknown: the format byte, not optional fields, is how the format
// evolves, so a field this version does not know means a damaged record.
// So does a known field of the wrong wire type, which protobuf keeps as
// unknown too; the error names the first such field.
func refuseUnknown(msg proto.Message) error {
	u := msg.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return nil
	}
	num, typ, _ := protowire.ConsumeTag(u)
	fd := msg.ProtoReflect().Descriptor().Fields().ByNumber(num)
	if fd == nil {
		return fmt.Errorf("unknown field %d of %s", num, msg.ProtoReflect().Descriptor().Name())
	}
	return fmt.Errorf("field %d (%s) has wire type %d, not %s's", num, fd.Name(), typ, fd.Kind())
}
