package reconcile

import (
	"testing"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// keepCopy: the record's host wins unless its copy is down while exactly
// one other runs (issue 31: a stale copy is never restarted while the
// guest runs elsewhere); no host, its cluster; else the only running copy;
// ambiguity keeps nothing.
func TestKeepCopy(t *testing.T) {
	at := func(h, c string, up bool) backend.Observed {
		o := backend.Observed{Placement: backend.Placement{Host: h}, ClusterID: c, Run: backend.RunState{State: backend.RunShutoff}}
		if up {
			o.Run.State = backend.RunRunning
		}
		return o
	}
	cases := []struct {
		name   string
		m      record.Machine
		copies []backend.Observed
		want   int
	}{
		{"recorded host", record.Machine{HostName: "b"}, []backend.Observed{at("a", "", false), at("b", "", true)}, 1},
		{"recorded host, both running", record.Machine{HostName: "b"}, []backend.Observed{at("a", "", true), at("b", "", true)}, 1},
		{"recorded host down, both down", record.Machine{HostName: "b"}, []backend.Observed{at("a", "", false), at("b", "", false)}, 1},
		{"recorded host shut off, the guest runs elsewhere", record.Machine{HostName: "b"}, []backend.Observed{at("a", "", true), at("b", "", false)}, 0},
		{"recorded host shut off, two run elsewhere", record.Machine{HostName: "b"},
			[]backend.Observed{at("a", "", true), at("b", "", false), at("c", "", true)}, 1},
		{"recorded host absent", record.Machine{HostName: "c"}, []backend.Observed{at("a", "", true), at("b", "", true)}, -1},
		{"binding", record.Machine{Cluster: "k"}, []backend.Observed{at("a", "", true), at("b", "k", true)}, 1},
		{"binding twice", record.Machine{Cluster: "k"}, []backend.Observed{at("a", "k", true), at("b", "k", true)}, -1},
		{"only running", record.Machine{}, []backend.Observed{at("a", "", false), at("b", "", true)}, 1},
		{"both running", record.Machine{}, []backend.Observed{at("a", "", true), at("b", "", true)}, -1},
	}
	for _, c := range cases {
		got, ok := keepCopy(&c.m, c.copies)
		if !ok {
			got = -1
		}
		if got != c.want {
			t.Errorf("%s: kept %d, want %d", c.name, got, c.want)
		}
	}
}
