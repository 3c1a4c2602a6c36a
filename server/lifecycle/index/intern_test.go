package index

import (
	"reflect"
	"testing"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// Equal maps become one map whether they arrive as one shared map (records
// loaded from the store) or as distinct copies (seed slots); unequal maps
// stay apart, and empty ones become nil.
func TestInternShares(t *testing.T) {
	shared := map[string]string{"cpu": "2", "memory": "4Gi"}
	ms := []record.Machine{
		{ID: "a", Resources: shared, Labels: map[string]string{"zone": "z1"}},
		{ID: "b", Resources: shared, Labels: map[string]string{"zone": "z1"}},
		{ID: "c", Resources: map[string]string{"cpu": "2", "memory": "4Gi"}, Labels: map[string]string{"zone": "z2"}},
		{ID: "d", Resources: map[string]string{"cpu": "2"}, Labels: map[string]string{}},
		// Length prefixes keep "a:b" + "" apart from "a" + ":b".
		{ID: "e", Allocatable: map[string]string{"a:b": ""}},
		{ID: "f", Allocatable: map[string]string{"a": ":b"}},
	}
	in := NewMapInterner()
	in.Machines(ms)
	in.Machines(ms) // again: every map is now known by identity
	switch {
	case !sameMap(ms[0].Resources, ms[1].Resources) || !sameMap(ms[0].Resources, ms[2].Resources):
		t.Error("equal resources not shared")
	case !sameMap(ms[0].Labels, ms[1].Labels):
		t.Error("equal labels not shared")
	case sameMap(ms[0].Labels, ms[2].Labels) || ms[2].Labels["zone"] != "z2":
		t.Error("different labels shared")
	case sameMap(ms[0].Resources, ms[3].Resources) || len(ms[3].Resources) != 1:
		t.Error("different resources shared")
	case ms[3].Labels != nil:
		t.Error("empty map kept")
	case sameMap(ms[4].Allocatable, ms[5].Allocatable) || ms[5].Allocatable["a"] != ":b":
		t.Error("ambiguous key: different maps shared")
	}
}
