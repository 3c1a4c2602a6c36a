package volume

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/rollback"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// testPool opens libvirt's test driver and names its pool. The driver's
// default host is shared by the process's connections: each test names
// its volumes after itself.
func testPool(t *testing.T) (virt.Conn, virt.Pool, string) {
	t.Helper()
	conn, err := virt.Dial("test:///default")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Close() })
	const name = "default-pool"
	pool, err := conn.LookupStoragePoolByName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Free() })
	return conn, pool, name
}

func TestStoreDeleteInKeepsGolden(t *testing.T) {
	t.Parallel()
	conn, pool, name := testPool(t)
	golden, vol := t.Name()+"-golden.qcow2", t.Name()+"-m.qcow2"
	s := Store{Pool: name, Golden: golden}
	for _, v := range []string{golden, vol} {
		if _, err := CreatePlain(pool, v, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = Delete(pool, golden, "") })
	if err := s.DeleteIn(conn, golden); !errors.Is(err, ErrGolden) {
		t.Fatalf("DeleteIn(golden) = %v, want ErrGolden", err)
	}
	if err := s.DeleteIn(conn, vol); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIn(conn, vol); err != nil {
		t.Fatalf("a volume already gone: %v", err)
	}
	names := s.Names(conn)
	if !slices.Contains(names, golden) || slices.Contains(names, vol) {
		t.Fatalf("volumes after the deletes: %q", names)
	}
	if err := (Store{Pool: "no-such-pool"}).DeleteIn(conn, vol); err == nil {
		t.Fatal("DeleteIn in a missing pool succeeded")
	}
	if got := (Store{Pool: "no-such-pool"}).Names(conn); got != nil {
		t.Fatalf("Names of a missing pool = %q, want nil", got)
	}
}

func TestStoreEnsureSeedWithoutUserData(t *testing.T) {
	t.Parallel()
	conn, pool, name := testPool(t)
	seed := t.Name() + "-seed.iso"
	var undo rollback.Stack
	path, err := Store{Pool: name}.EnsureSeed(conn, pool, seed, "d", &undo)
	if err != nil || path != "" || undo.Len() != 0 {
		t.Fatalf("EnsureSeed without user data = %q, %v (undo %d); want nothing done", path, err, undo.Len())
	}
	if slices.Contains(Store{Pool: name}.Names(conn), seed) {
		t.Fatal("a seed volume was made without user data")
	}
}

// A seed an earlier attempt left is reused as it is, and never undone by
// this attempt (it did not make it).
func TestStoreEnsureSeedReusesLeftSeed(t *testing.T) {
	t.Parallel()
	conn, pool, name := testPool(t)
	seed := t.Name() + "-seed.iso"
	vol, err := CreateRaw(pool, seed, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Delete(pool, seed, "") })
	want, err := vol.GetPath()
	_ = vol.Free()
	if err != nil {
		t.Fatal(err)
	}
	var undo rollback.Stack
	path, err := Store{Pool: name, UserData: "/nonexistent/user-data"}.EnsureSeed(conn, pool, seed, "d", &undo)
	if err != nil || path != want {
		t.Fatalf("EnsureSeed = %q, %v; want the left seed %q", path, err, want)
	}
	if undo.Len() != 0 {
		t.Fatal("a reused seed was pushed for undo")
	}
	if err := undo.Run(slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}
