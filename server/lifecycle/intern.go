package lifecycle

import (
	"slices"
	"strings"
)

// mapInterner makes equal maps one shared map. A fleet's slots carry the
// same resources, allocatable and labels per offering; decoded from the
// store or built by the capacity model they would otherwise be a few
// hundred bytes each, per machine. Safe because records never write into
// their maps (see Machine.edit).
type mapInterner struct {
	seen map[string]map[string]string
	key  strings.Builder
}

func newMapInterner() *mapInterner {
	return &mapInterner{seen: make(map[string]map[string]string)}
}

func (in *mapInterner) machines(ms []Machine) {
	for i := range ms {
		m := &ms[i]
		m.Resources = in.intern(m.Resources)
		m.Allocatable = in.intern(m.Allocatable)
		m.Labels = in.intern(m.Labels)
	}
}

func (in *mapInterner) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
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
