package store

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bigfleet/libvirt-provider/server/lifecycle"
)

// A machine record's value starts with a format byte:
//
//	'{'  schema 1: JSON of lifecycle.Machine (read only; rewritten as v1
//	     when the record is next written, or by Compact)
//	0x01 binary v1: protobuf wire fields below
//
// A new format gets a new byte; readers sniff it, so files that mix formats
// (a partly migrated file) load record by record.
const (
	formatJSON     = '{'
	formatBinaryV1 = 0x01
)

// Machine record fields (binary v1). The id is the record's key and is not
// repeated in the value; what a capacity offering's slots share (type,
// zone, price, resources, allocatable, labels, hardware) is stored once in
// the offerings bucket and referenced by id (offering.go).
const (
	fState         protowire.Number = 1
	fHostProvider  protowire.Number = 2
	fHostRef       protowire.Number = 3
	fOffering      protowire.Number = 4
	fLastError     protowire.Number = 5
	fCluster       protowire.Number = 6
	fShardMetadata protowire.Number = 7
	fDomain        protowire.Number = 8
	fHostName      protowire.Number = 9
	fOperationID   protowire.Number = 10
	fOpKind        protowire.Number = 11
	fOpDeadline    protowire.Number = 12
	fDrainGrace    protowire.Number = 13
	fStateSince    protowire.Number = 14
	fRevision      protowire.Number = 15
	fHistory       protowire.Number = 16
)

// Transition fields, nested in fHistory.
const (
	tOperationID protowire.Number = 1
	tKind        protowire.Number = 2
	tFrom        protowire.Number = 3
	tTo          protowire.Number = 4
	tStarted     protowire.Number = 5
	tEnded       protowire.Number = 6
	tOutcome     protowire.Number = 7
	tLastError   protowire.Number = 8
	tNote        protowire.Number = 9
)

// encodeRecord is m's value in binary v1, with its offering part replaced
// by the reference off (0: the offering part is empty).
func encodeRecord(m *lifecycle.Machine, off uint64) []byte {
	b := make([]byte, 0, 96+len(m.History)*96)
	b = append(b, formatBinaryV1)
	b = appendInt(b, fState, int64(m.State))
	b = appendString(b, fHostProvider, m.Host.Provider)
	b = appendString(b, fHostRef, m.Host.Ref)
	b = appendUint(b, fOffering, off)
	b = appendString(b, fLastError, m.LastError)
	b = appendString(b, fCluster, m.Cluster)
	b = appendMap(b, fShardMetadata, m.ShardMetadata)
	b = appendString(b, fDomain, m.Domain)
	b = appendString(b, fHostName, m.HostName)
	b = appendString(b, fOperationID, m.OperationID)
	b = appendString(b, fOpKind, string(m.OpKind))
	b = appendTime(b, fOpDeadline, m.OpDeadline)
	b = appendInt(b, fDrainGrace, m.DrainGrace)
	b = appendTime(b, fStateSince, m.StateSince)
	b = appendUint(b, fRevision, m.Revision)
	for i := range m.History {
		b = appendNested(b, fHistory, func(b []byte) []byte { return appendTransition(b, &m.History[i]) })
	}
	return b
}

func appendTransition(b []byte, t *lifecycle.Transition) []byte {
	b = appendString(b, tOperationID, t.OperationID)
	b = appendString(b, tKind, string(t.Kind))
	b = appendInt(b, tFrom, int64(t.From))
	b = appendInt(b, tTo, int64(t.To))
	b = appendTime(b, tStarted, t.Started)
	b = appendTime(b, tEnded, t.Ended)
	b = appendString(b, tOutcome, t.Outcome)
	b = appendString(b, tLastError, t.LastError)
	return appendString(b, tNote, t.Note)
}

// offeringLookup resolves an offering reference of a record.
type offeringLookup func(id uint64) (*offering, bool)

// decodeMachine decodes a record of any known format. k is its key (the
// machine id); v may point into bbolt's mmap: nothing returned aliases it.
func decodeMachine(k, v []byte, offerings offeringLookup) (lifecycle.Machine, error) {
	var m lifecycle.Machine
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

func decodeRecordV1(m *lifecycle.Machine, v []byte, offerings offeringLookup) error {
	d := decoder{b: v}
	for num, typ, ok := d.next(); ok; num, typ, ok = d.next() {
		switch num {
		case fState:
			m.State = lifecycle.State(d.int(num, typ))
		case fHostProvider:
			m.Host.Provider = d.string(num, typ)
		case fHostRef:
			m.Host.Ref = d.string(num, typ)
		case fOffering:
			id := d.uint(num, typ)
			if d.err != nil {
				break
			}
			o, ok := offerings(id)
			if !ok {
				return fmt.Errorf("offering %d is not in the file", id)
			}
			o.apply(m)
		case fLastError:
			m.LastError = d.string(num, typ)
		case fCluster:
			m.Cluster = d.string(num, typ)
		case fShardMetadata:
			d.mapEntry(num, typ, &m.ShardMetadata)
		case fDomain:
			m.Domain = d.string(num, typ)
		case fHostName:
			m.HostName = d.string(num, typ)
		case fOperationID:
			m.OperationID = d.string(num, typ)
		case fOpKind:
			m.OpKind = lifecycle.OpKind(d.string(num, typ))
		case fOpDeadline:
			m.OpDeadline = d.time(num, typ)
		case fDrainGrace:
			m.DrainGrace = d.int(num, typ)
		case fStateSince:
			m.StateSince = d.time(num, typ)
		case fRevision:
			m.Revision = d.uint(num, typ)
		case fHistory:
			t, err := decodeTransition(d.bytes(num, typ))
			if d.err == nil && err != nil {
				return fmt.Errorf("history entry %d: %w", len(m.History), err)
			}
			m.History = append(m.History, t)
		default:
			d.unknown(num)
		}
	}
	return d.err
}

func decodeTransition(v []byte) (lifecycle.Transition, error) {
	var t lifecycle.Transition
	d := decoder{b: v}
	for num, typ, ok := d.next(); ok; num, typ, ok = d.next() {
		switch num {
		case tOperationID:
			t.OperationID = d.string(num, typ)
		case tKind:
			t.Kind = lifecycle.OpKind(d.string(num, typ))
		case tFrom:
			t.From = lifecycle.State(d.int(num, typ))
		case tTo:
			t.To = lifecycle.State(d.int(num, typ))
		case tStarted:
			t.Started = d.time(num, typ)
		case tEnded:
			t.Ended = d.time(num, typ)
		case tOutcome:
			t.Outcome = d.string(num, typ)
		case tLastError:
			t.LastError = d.string(num, typ)
		case tNote:
			t.Note = d.string(num, typ)
		default:
			d.unknown(num)
		}
	}
	return t, d.err
}
