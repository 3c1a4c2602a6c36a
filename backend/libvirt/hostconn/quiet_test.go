package hostconn

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// While Config.MayChange says no, a call that changes the host is refused
// before it reaches libvirt, as a transient fault naming the call and the
// cause; reads and aborts go on; once it says yes, changes run again.
func TestMayChangeHoldsBackChanges(t *testing.T) {
	late := errors.New("renewal late")
	var why error = late
	h := New(Config{Zone: "z1", Name: "z1", URI: "test:///default", CallTimeout: time.Second,
		MayChange: func() error { return why }})
	ran := map[string]bool{}
	call := func(name string) error {
		return do(h, newCallSlots(), &countedHandle{}, name, 0, func() error { ran[name] = true; return nil })
	}
	for _, name := range []string{"DomainDefineXML", "Create bf-x", "Destroy bf-x", "SetMetadata bf-x", "Migrate3", "volume Delete bf-x.qcow2", "StorageVolCreateXML"} {
		err := call(name)
		if err == nil || ran[name] || !errors.Is(err, late) || !backend.IsTransient(err) || !strings.Contains(err.Error(), name+" not started") {
			t.Errorf("%s while held back: err %v, ran %v; want refused, transient, naming the call and the cause", name, err, ran[name])
		}
	}
	for _, name := range []string{"AbortJob bf-x", "LookupDomainByName bf-x", "GetXMLDesc bf-x", "volume GetPath bf-x.qcow2"} {
		if err := call(name); err != nil || !ran[name] {
			t.Errorf("%s while changes are held back: err %v, ran %v; want it to run", name, err, ran[name])
		}
	}
	why = nil
	if err := call("DomainDefineXML"); err != nil || !ran["DomainDefineXML"] {
		t.Fatalf("define once allowed again: err %v, ran %v", err, ran["DomainDefineXML"])
	}
}
