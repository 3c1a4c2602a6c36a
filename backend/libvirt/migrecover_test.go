package libvirt

import (
	"context"
	"errors"
	"slices"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
)

func TestPlanRecovery(t *testing.T) {
	t.Parallel()
	const (
		paused   = libvirt.DOMAIN_PAUSED
		running  = libvirt.DOMAIN_RUNNING
		shutoff  = libvirt.DOMAIN_SHUTOFF
		byMig    = int(libvirt.DOMAIN_PAUSED_MIGRATION)
		byUser   = int(libvirt.DOMAIN_PAUSED_USER)
		migrated = int(libvirt.DOMAIN_SHUTOFF_MIGRATED)
	)
	src := func(st libvirt.DomainState, r int) copyState {
		return copyState{pl: backend.Placement{Host: "a"}, st: st, reason: r, recorded: true}
	}
	dst := func(st libvirt.DomainState, r int) copyState {
		return copyState{pl: backend.Placement{Host: "b"}, st: st, reason: r}
	}
	cases := map[string]struct {
		cs     []copyState
		live   int
		resume bool
		remove []int
		err    bool
	}{
		"completed: destination runs, source paused": {cs: []copyState{src(paused, byMig), dst(running, 0)}, live: 1, remove: []int{0}},
		"completed: source shut off as migrated":     {cs: []copyState{src(shutoff, migrated), dst(running, 0)}, live: 1, remove: []int{0}},
		"not completed: both paused":                 {cs: []copyState{src(paused, byMig), dst(paused, byMig)}, live: 0, resume: true, remove: []int{1}},
		"not completed: destination gone":            {cs: []copyState{src(paused, byMig)}, live: 0, resume: true},
		"aborted: source runs, destination paused":   {cs: []copyState{src(running, 0), dst(paused, byMig)}, live: 0, remove: []int{1}},
		"a job is still active":                      {cs: []copyState{src(paused, byMig), {pl: backend.Placement{Host: "b"}, st: paused, reason: byMig, job: true}}, err: true},
		"two copies run":                             {cs: []copyState{src(running, 0), dst(running, 0)}, err: true},
		"source paused by a user":                    {cs: []copyState{src(paused, byUser), dst(paused, byMig)}, err: true},
		"the other copy is paused by a user":         {cs: []copyState{src(running, 0), dst(paused, byUser)}, err: true},
		"only a paused copy elsewhere":               {cs: []copyState{dst(paused, byMig)}, err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := planRecovery(tc.cs)
			if tc.err {
				if !errors.Is(err, errUndecided) {
					t.Fatalf("plan %+v, err %v: want undecided", p, err)
				}
				return
			}
			if err != nil || p.live != tc.live || p.resume != tc.resume || !slices.Equal(p.remove, tc.remove) {
				t.Fatalf("plan %+v, err %v; want live %d resume %v remove %v", p, err, tc.live, tc.resume, tc.remove)
			}
		})
	}
}

// On the test driver (no migration, so no copy is ever paused by one),
// a copy on the other host beside the running one is not a migration's
// leftover: nothing is removed.
func TestRecoverMigrationChangesNothingWithoutProof(t *testing.T) {
	t.Parallel()
	b, _, pl := emulatedMigration(t)
	to := map[string]string{"a": "b", "b": "a"}[pl.Host]
	sc, dc := hostConn(t, b, pl.Host), hostConn(t, b, to)
	x, err := domainXML(t, sc, pl.Domain).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := dc.DomainDefineXML(x)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	if err := d.Suspend(); err != nil { // paused, but by a user
		t.Fatal(err)
	}
	other := pl
	other.Host = to
	_, err = b.RecoverMigration(context.Background(), "m1", pl, []backend.Placement{pl, other})
	if !errors.Is(err, errUndecided) {
		t.Fatalf("err = %v", err)
	}
	if !domainExists(t, sc, pl.Domain) || !domainExists(t, dc, pl.Domain) {
		t.Fatal("a copy was removed without proof")
	}
}
