package store

import (
	"fmt"
	"slices"

	storev1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/store/v1"
)

// A string map in a record is a list of entries in key order (store.proto's
// Entry): equal maps encode to equal bytes, which is how offerings are
// deduplicated, and the order is ours to write, not protobuf's reflective
// deterministic mode.

func toEntries(m map[string]string) []*storev1.Entry {
	if len(m) == 0 {
		return nil
	}
	// Few allocations: this runs for every Commit (an offering's three
	// maps are encoded to find its id). strs holds the keys, then the
	// values, which the entries point into.
	n := len(m)
	strs := make([]string, 0, 2*n)
	for k := range m {
		strs = append(strs, k)
	}
	slices.Sort(strs)
	for _, k := range strs[:n] {
		strs = append(strs, m[k])
	}
	block := make([]storev1.Entry, n)
	out := make([]*storev1.Entry, n)
	for i := range n {
		block[i].Key, block[i].Value = &strs[i], &strs[n+i]
		out[i] = &block[i]
	}
	return out
}

// fromEntries is nil for no entries; a key that repeats keeps its last
// value, as a protobuf map does. An entry with an unknown field is damage.
func fromEntries(es []*storev1.Entry) (map[string]string, error) {
	if len(es) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(es))
	for _, e := range es {
		if err := refuseUnknown(e); err != nil {
			return nil, fmt.Errorf("map entry: %w", err)
		}
		m[e.GetKey()] = e.GetValue()
	}
	return m, nil
}
