package admin

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/callerid"
)

// TestWritesAreTheMethodsWithSideEffects: IsWrite, which decides which
// methods the caller identity guard lets through to the write gate,
// names exactly the admin methods not marked NO_SIDE_EFFECTS in the
// proto; every other method is a read, which callerid.AdminReads lists
// for the metric's method label.
func TestWritesAreTheMethodsWithSideEffects(t *testing.T) {
	t.Parallel()
	svc := adminv1.File_libvirtprovider_admin_v1_admin_proto.Services().ByName("AdminService")
	methods := svc.Methods()
	var reads []string
	for i := range methods.Len() {
		m := methods.Get(i)
		name := string(m.Name())
		opts, _ := m.Options().(*descriptorpb.MethodOptions)
		read := opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
		if IsWrite(name) == read {
			t.Errorf("%s: IsWrite %v, but NO_SIDE_EFFECTS is %v", name, IsWrite(name), read)
		}
		if read {
			reads = append(reads, name)
		}
	}
	for w := range writeMethods {
		if methods.ByName(protoName(w)) == nil {
			t.Errorf("IsWrite names %s, which the service does not have", w)
		}
	}
	slices.Sort(reads)
	want := slices.Sorted(slices.Values(callerid.AdminReads))
	if !slices.Equal(reads, want) {
		t.Errorf("reads %v; callerid.AdminReads %v", reads, want)
	}
}

func protoName(s string) protoreflect.Name { return protoreflect.Name(s) }
