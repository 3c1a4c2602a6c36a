package migrate

import (
	"testing"

	"libvirt.org/go/libvirt"
)

// TLS is the default; --migrate-tls=false is the only way to a plain stream.
func TestFlagsTLSUnlessPlain(t *testing.T) {
	t.Parallel()
	if f := Flags(false); f&libvirt.MIGRATE_TLS == 0 || f&baseFlags != baseFlags {
		t.Fatalf("default flags %v lack TLS or the base flags", f)
	}
	if f := Flags(true); f != baseFlags {
		t.Fatalf("plain flags %v, want %v", f, baseFlags)
	}
	for _, want := range []libvirt.DomainMigrateFlags{libvirt.MIGRATE_LIVE, libvirt.MIGRATE_PERSIST_DEST, libvirt.MIGRATE_UNDEFINE_SOURCE} {
		if baseFlags&want == 0 {
			t.Errorf("base flags %v lack %v", baseFlags, want)
		}
	}
}

func TestStorageMode(t *testing.T) {
	t.Parallel()
	if got := StorageMode(Flags(false) | libvirt.MIGRATE_NON_SHARED_INC); got != "overlay copied (golden image on both hosts)" {
		t.Errorf("incremental: %q", got)
	}
	if got := StorageMode(Flags(false) | libvirt.MIGRATE_NON_SHARED_DISK); got != "whole disk copied" {
		t.Errorf("whole disk: %q", got)
	}
}
