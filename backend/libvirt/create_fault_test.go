package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
	"libvirt.org/go/libvirt"
)

// strangers puts on the host what is not ours (a domain with our prefix
// but another provider's metadata, an unrelated domain, a volume in our
// pool) and returns a check that they are exactly as they were.
func strangers(t *testing.T, b *Backend) func() {
	t.Helper()
	c := testConn(t, b, "z1")
	names := []string{meta.DomainName("other-provider", "x"), "unrelated-vm"}
	before := []string{
		defineStranger(t, c, names[0], &meta.Metadata{Provider: "other-provider", MachineID: "x"}),
		defineStranger(t, c, names[1], nil),
	}
	pool, err := c.LookupStoragePoolByName("bigfleet")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	vol, err := volume.CreateRaw(lvp(pool), "stranger.img", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_ = vol.Free()
	return func() {
		t.Helper()
		for i, n := range names {
			if got := domainXMLString(t, c, n); got != before[i] {
				t.Fatalf("stranger domain %s changed", n)
			}
		}
		for _, v := range []string{"stranger.img", "golden.qcow2", "golden-raw.img"} {
			if !volumeExists(t, c, "bigfleet", v) {
				t.Fatalf("volume %s that is not ours is gone", v)
			}
		}
	}
}

func domainXMLString(t *testing.T, c *libvirt.Connect, name string) string {
	t.Helper()
	dom, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatalf("domain %s: %v", name, err)
	}
	defer dom.Free()
	s, err := dom.GetXMLDesc(0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// onlyOurs checks that every call that changed the host was about one of
// the machine's own objects.
func onlyOurs(t *testing.T, f *faults, domain string) {
	t.Helper()
	ours := map[string]bool{domain: true, meta.OverlayName(domain): true, meta.SeedName(domain): true}
	for _, m := range f.mutations() {
		_, name, _ := strings.Cut(m, " ")
		if !ours[name] {
			t.Fatalf("%q touched something that is not ours (all: %q)", m, f.mutations())
		}
	}
}

// stepFault is one fault at one step of a transition.
type stepFault struct {
	step string // the error must start with this
	op   string
	name string // "" = any; "$dom", "$overlay", "$seed" are the machine's
	nth  int
}

func (s stepFault) rule(kind faultKind, dom string) *fault {
	name := strings.NewReplacer("$dom", dom, "$overlay", meta.OverlayName(dom), "$seed", meta.SeedName(dom)).Replace(s.name)
	return &fault{op: s.op, name: name, nth: max(s.nth, 1), kind: kind}
}

// mutatingOps change the host. (dom.UndefineFlags is not among them here:
// the test driver refuses its flags, so the plain dom.Undefine that
// follows is the call that takes effect.)
var mutatingOps = map[string]bool{"pool.StorageVolCreateXML": true, "conn.UploadVolume": true, "conn.DomainDefineXML": true,
	"dom.Create": true, "dom.Destroy": true, "dom.Undefine": true, "vol.Delete": true, "dom.SetMetadata": true}

// kindsFor: every step gets an RPC error, a timeout and a drop of the
// link; calls that change the host also get a reply lost after the change.
func kindsFor(op string) []faultKind {
	k := []faultKind{faultRPC, faultTimeout, faultDrop}
	if mutatingOps[op] {
		k = append(k, faultAfter)
	}
	return k
}

// TestCreateFaultAtEveryStep: whatever step fails and however, Create
// returns the step and the cause, a retry once the fault has passed
// succeeds, and nothing that is not ours is touched. A fault that did not
// take effect (RPC error, timeout) leaves nothing behind.
func TestCreateFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	needISOTool(t)
	ud := userData(t)
	steps := []stepFault{
		{"create: look up domain: ", "conn.LookupDomainByName", "$dom", 1},
		{"create: storage pool: bigfleet: ", "conn.LookupStoragePoolByName", "bigfleet", 1},
		{"create: golden image: ", "pool.LookupStorageVolByName", "golden.qcow2", 1},
		{"create: golden image: ", "vol.GetXMLDesc", "golden.qcow2", 1},
		{"create: golden image: ", "vol.GetInfo", "golden.qcow2", 1},
		{"create: overlay volume: ", "pool.LookupStorageVolByName", "$overlay", 1},
		{"create: overlay volume: ", "pool.StorageVolCreateXML", "$overlay", 1},
		{"create: overlay volume: ", "vol.GetPath", "$overlay", 1},
		{"create: seed volume: ", "pool.LookupStorageVolByName", "$seed", 1},
		{"create: seed volume: ", "pool.StorageVolCreateXML", "$seed", 1},
		{"create: seed volume: upload: ", "conn.UploadVolume", "$seed", 1},
		{"create: seed volume: ", "vol.GetPath", "$seed", 1},
		{"create: define domain: ", "conn.DomainDefineXML", "$dom", 1},
		{"create: start domain: ", "dom.Create", "$dom", 1},
		{"create: wait running: ", "dom.GetState", "$dom", 1},
	}
	for _, s := range steps {
		for _, kind := range kindsFor(s.op) {
			t.Run(s.op+"/"+s.name+"/"+kindName(kind), func(t *testing.T) {
				t.Parallel()
				b, f, _ := newFaultBackend(t, func(c *Config) { c.BaseUserData = ud }, func(f *faults) { f.emulateU = true })
				same := strangers(t, b)
				c := testConn(t, b, "z1")
				name := meta.DomainName(b.cfg.Provider, "m1")
				r := f.add(s.rule(kind, name))
				_, err := b.Create(context.Background(), spec("m1"))
				if f.hits(r) != 1 {
					t.Fatalf("the fault did not fire (err %v)", err)
				}
				if err == nil || !strings.HasPrefix(err.Error(), s.step) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("err = %v, want %q... with the injected cause", err, s.step)
				}
				if kind == faultRPC || kind == faultTimeout {
					if domainExists(t, c, name) || volumeExists(t, c, "bigfleet", meta.OverlayName(name)) ||
						volumeExists(t, c, "bigfleet", meta.SeedName(name)) {
						t.Fatal("a failed attempt left a piece behind")
					}
				}
				f.clear()
				waitFor(t, 5*time.Second, func() bool { return b.ZoneReady("z1") == nil })
				if _, err := b.Create(context.Background(), spec("m1")); err != nil {
					t.Fatalf("retry after the fault: %v", err)
				}
				if st := domainState(t, c, name); st != libvirt.DOMAIN_RUNNING || !volumeExists(t, c, "bigfleet", meta.OverlayName(name)) {
					t.Fatalf("after the retry: state %d", st)
				}
				same()
				onlyOurs(t, f, name)
			})
		}
	}
}

func domainState(t *testing.T, c *libvirt.Connect, name string) libvirt.DomainState {
	t.Helper()
	dom, err := c.LookupDomainByName(name)
	if err != nil {
		t.Fatalf("domain %s: %v", name, err)
	}
	defer dom.Free()
	st, _, err := dom.GetState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
