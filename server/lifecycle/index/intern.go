package index

import (
	"reflect"
	"slices"
	"strings"
)

// MapInterner makes equal maps one shared map. A fleet's slots carry the
// same resources, allocatable and labels per offering; decoded from the
// store or built by the capacity model they would otherwise be a few
// hundred bytes each, per machine. Safe because records never write into
// their maps (see Machine.Edit).
type MapInterner struct {
	seen map[string]map[string]string
	key  strings.Builder
	// byPtr remembers maps already interned, by identity: records loaded
	// from the store already share one map per offering, so most lookups
	// end here without sorting and hashing the map's contents. Each entry
	// holds the map itself, so its address cannot be reused meanwhile.
	byPtr map[uintptr]ptrEntry
}

type ptrEntry struct{ orig, shared map[string]string }

// NewMapInterner returns an empty interner.
func NewMapInterner() *MapInterner {
	return &MapInterner{seen: make(map[string]map[string]string), byPtr: make(map[uintptr]ptrEntry)}
}

// Machines interns the maps of every record of ms in place.
func (in *MapInterner) Machines(ms []Machine) {
	for i := range ms {
		m := &ms[i]
		m.Resources = in.intern(m.Resources)
		m.Allocatable = in.intern(m.Allocatable)
		m.Labels = in.intern(m.Labels)
	}
}

func (in *MapInterner) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	p := reflect.ValueOf(m).Pointer()
	if e, ok := in.byPtr[p]; ok {
		return e.shared
	}
	shared := in.byContent(m)
	in.byPtr[p] = ptrEntry{orig: m, shared: shared}
	return shared
}

func (in *MapInterner) byContent(m map[string]string) map[string]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	in.key.Reset()
	for _, k := range keys {
		// Length prefixes keep the key unambiguous whatever the bytes.
		writeLen(&in.key, k)
		writeLen(&in.key, m[k])
	}
	if shared, ok := in.seen[in.key.String()]; ok {
		return shared
	}
	in.seen[in.key.String()] = m
	return m
}

func writeLen(b *strings.Builder, s string) {
	var n [20]byte
	i := len(n)
	for v := len(s); ; v /= 10 {
		i--
		n[i] = byte('0' + v%10)
		if v < 10 {
			break
		}
	}
	b.Write(n[i:])
	b.WriteByte(':')
	b.WriteString(s)
}
