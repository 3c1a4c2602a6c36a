package recovery

import (
	"errors"
	"slices"
	"testing"

	"libvirt.org/go/libvirt"
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
	src := func(st libvirt.DomainState, r int) Copy {
		return Copy{Host: "a", State: st, Reason: r, Recorded: true}
	}
	dst := func(st libvirt.DomainState, r int) Copy {
		return Copy{Host: "b", State: st, Reason: r}
	}
	cases := map[string]struct {
		cs     []Copy
		live   int
		resume bool
		remove []int
		err    bool
	}{
		"completed: destination runs, source paused": {cs: []Copy{src(paused, byMig), dst(running, 0)}, live: 1, remove: []int{0}},
		"completed: source shut off as migrated":     {cs: []Copy{src(shutoff, migrated), dst(running, 0)}, live: 1, remove: []int{0}},
		"not completed: both paused":                 {cs: []Copy{src(paused, byMig), dst(paused, byMig)}, live: 0, resume: true, remove: []int{1}},
		"not completed: destination gone":            {cs: []Copy{src(paused, byMig)}, live: 0, resume: true},
		"aborted: source runs, destination paused":   {cs: []Copy{src(running, 0), dst(paused, byMig)}, live: 0, remove: []int{1}},
		"a job is still active":                      {cs: []Copy{src(paused, byMig), {Host: "b", State: paused, Reason: byMig, Job: true}}, err: true},
		"two copies run":                             {cs: []Copy{src(running, 0), dst(running, 0)}, err: true},
		"source paused by a user":                    {cs: []Copy{src(paused, byUser), dst(paused, byMig)}, err: true},
		"the other copy is paused by a user":         {cs: []Copy{src(running, 0), dst(paused, byUser)}, err: true},
		"only a paused copy elsewhere":               {cs: []Copy{dst(paused, byMig)}, err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := Decide(tc.cs)
			if tc.err {
				if !errors.Is(err, ErrUndecided) {
					t.Fatalf("plan %+v, err %v: want undecided", p, err)
				}
				return
			}
			if err != nil || p.Live != tc.live || p.Resume != tc.resume || !slices.Equal(p.Remove, tc.remove) {
				t.Fatalf("plan %+v, err %v; want live %d resume %v remove %v", p, err, tc.live, tc.resume, tc.remove)
			}
		})
	}
}
