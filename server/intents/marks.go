package intents

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// marksV1 is the journal's marks, in JSON an object by machine id, then
// shard id, of [epoch, sequence]: each id written once. It has its own
// encoder because every journal write encodes every mark (8000 slots:
// encoding/json's sorted maps took ~20 ms a write, this ~3 ms).
type marksV1 map[record.MarkKey]record.Mark

func (m marksV1) MarshalJSON() ([]byte, error) {
	keys := make([]record.MarkKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b record.MarkKey) int {
		return cmp.Or(cmp.Compare(a.MachineID, b.MachineID), cmp.Compare(a.ShardID, b.ShardID))
	})
	b := make([]byte, 0, 48*len(keys)+2)
	b = append(b, '{')
	for i, k := range keys {
		if i == 0 || keys[i-1].MachineID != k.MachineID {
			if i > 0 {
				b = append(b, "},"...)
			}
			b = appendString(b, k.MachineID)
			b = append(b, ":{"...)
		} else {
			b = append(b, ',')
		}
		b = appendString(b, k.ShardID)
		v := m[k]
		b = append(b, ":["...)
		b = strconv.AppendInt(b, v.Epoch, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, v.Sequence, 10)
		b = append(b, ']')
	}
	if len(keys) > 0 {
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

func (m *marksV1) UnmarshalJSON(data []byte) error {
	var byMachine map[string]map[string][]int64
	if err := json.Unmarshal(data, &byMachine); err != nil {
		return err
	}
	*m = marksV1{}
	for machine, byShard := range byMachine {
		for shard, es := range byShard {
			if len(es) != 2 {
				return fmt.Errorf("mark of shard %q on machine %q: %d numbers, want [epoch, sequence]", shard, machine, len(es))
			}
			(*m)[record.MarkKey{ShardID: shard, MachineID: machine}] = record.Mark{Epoch: es[0], Sequence: es[1]}
		}
	}
	return nil
}

// appendString appends s as a JSON string: plain ASCII as is, anything
// else through encoding/json (ids are proto strings: any UTF-8, and
// invalid bytes must round-trip as encoding/json's replacement does).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
