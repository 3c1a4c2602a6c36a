package guest

import (
	"fmt"
	"maps"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// The writes of a domain's metadata an operation makes: its fence marks
// before the work (recordMarks; a Configure's with its intent,
// recordIntent), the binding after it (writeMetadata). Configure, Drain
// and FinishConfigure call them in that order, so a Configure's path
// enters this file twice, once for each.

// writeMetadata writes md, all of the domain's metadata (binding, marks,
// owner), after checking again that the domain is still ours.
func (g *Guests) writeMetadata(t Target, md meta.Metadata) error {
	return t.Host.WithDomain(t.Domain, func(_ virt.Conn, dom virt.Domain) error {
		return meta.WriteOwned(dom, t.Domain, g.cfg.Provider, md)
	})
}

// WriteMetadata is writeMetadata for the backend's own tests and tools.
func (g *Guests) WriteMetadata(t Target, md meta.Metadata) error { return g.writeMetadata(t, md) }

// recordMarks merges a transition's fence marks into md and, when they
// move any stored mark, writes them (the binding unchanged) before the
// transition's work: a Configure or Drain that then fails still leaves
// the newer token on the host, so a provider rebuilt from the hosts after
// losing its state never accepts an older one. Every later write of md
// records them too.
func (g *Guests) recordMarks(t Target, md meta.Metadata, marks map[string]backend.FenceMark) (meta.Metadata, error) {
	merged := meta.MergeMarks(md.Marks, marks)
	if maps.Equal(merged, md.Marks) {
		return md, nil
	}
	md.Marks = merged
	if err := g.writeMetadata(t, md); err != nil {
		return md, fmt.Errorf("record fence marks: %w", err)
	}
	return md, nil
}

// recordIntent writes the Configure's intent (operation, cluster, shard
// metadata; never the blob) with its fence marks, in one write, before
// anything of the Configure reaches the guest: a provider that lost its
// state file then finds the Configure cut short on the domain and asks
// the guest how it ended, instead of adopting the machine IDLE. An
// attempt run again finds its own intent there and writes only what
// changed.
func (g *Guests) recordIntent(t Target, md meta.Metadata, spec backend.ConfigureSpec) (meta.Metadata, error) {
	merged := meta.MergeMarks(md.Marks, spec.Marks)
	c := md.Configure
	if maps.Equal(merged, md.Marks) && c.OperationID == spec.OperationID && c.ClusterID == spec.ClusterID &&
		maps.Equal(c.ShardMetadata, spec.ShardMetadata) {
		return md, nil
	}
	md.Marks = merged
	md.Configure = meta.ConfigureIntent{OperationID: spec.OperationID, ClusterID: spec.ClusterID,
		ShardMetadata: maps.Clone(spec.ShardMetadata), Since: time.Now().UTC()}
	if err := g.writeMetadata(t, md); err != nil {
		return md, fmt.Errorf("record intent and fence marks: %w", err)
	}
	return md, nil
}
