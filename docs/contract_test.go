package docs

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	bigfleetv1alpha1 "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
)

// fieldType spells a field's type the way contract.md does:
// string, int64, MachineState, map<string,string>, repeated Machine.
func fieldType(f protoreflect.FieldDescriptor) string {
	if f.IsMap() {
		return "map<" + fieldType(f.MapKey()) + "," + fieldType(f.MapValue()) + ">"
	}
	var t string
	switch f.Kind() {
	case protoreflect.MessageKind:
		t = string(f.Message().Name())
	case protoreflect.EnumKind:
		t = string(f.Enum().Name())
	default:
		t = f.Kind().String()
	}
	if f.Cardinality() == protoreflect.Repeated {
		t = "repeated " + t
	}
	return t
}

// messageRow renders a message as a row of contract.md's message table:
// "name type=number; …" in field-number order, reserved numbers in bold.
func messageRow(m protoreflect.MessageDescriptor) string {
	type part struct {
		num  int
		text string
	}
	var parts []part
	fields := m.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		parts = append(parts, part{int(f.Number()), fmt.Sprintf("%s %s=%d", f.Name(), fieldType(f), f.Number())})
	}
	ranges := m.ReservedRanges()
	var reserved []string
	first := 0
	for i := 0; i < ranges.Len(); i++ {
		for n := ranges.Get(i)[0]; n < ranges.Get(i)[1]; n++ {
			if first == 0 {
				first = int(n)
			}
			reserved = append(reserved, fmt.Sprint(n))
		}
	}
	if len(reserved) > 0 {
		parts = append(parts, part{first, "**reserved " + strings.Join(reserved, ", ") + "**"})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].num < parts[j].num })
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.text
	}
	return "| " + string(m.Name()) + " | " + strings.Join(texts, "; ") + " |"
}

// TestContractMatchesProto: contract.md's message table says exactly what
// the generated descriptors (and so the wire) say, for every message of
// bigfleet.v1alpha1, and its RPC table names every method.
func TestContractMatchesProto(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("contract.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	file := bigfleetv1alpha1.File_bigfleet_v1alpha1_provider_proto
	msgs := file.Messages()
	if msgs.Len() < 10 {
		t.Fatalf("provider.proto has only %d messages", msgs.Len())
	}
	for i := 0; i < msgs.Len(); i++ {
		if row := messageRow(msgs.Get(i)); !strings.Contains(doc, row+"\n") {
			t.Errorf("contract.md has no row\n%s\n(the wire says so; fix the doc, never the proto)", row)
		}
	}
	methods := file.Services().ByName("CapacityProvider").Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		row := fmt.Sprintf("| %s | %s | %s |", m.Name(), m.Input().Name(), m.Output().Name())
		if !strings.Contains(doc, row) {
			t.Errorf("contract.md has no RPC row %s", row)
		}
	}
}
