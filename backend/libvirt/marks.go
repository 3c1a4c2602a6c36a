package libvirt

import (
	"context"
	"fmt"
	"maps"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// ClearMark is backend.MarkClearer: it removes shardID's fence mark from
// the domain's metadata, the binding and the other marks unchanged (the
// admin API's fence clear). A domain that holds no such mark is left
// alone; one that is not ours is an error, as for every write.
func (b *Backend) ClearMark(_ context.Context, machineID string, pl backend.Placement, shardID string) error {
	h, name, err := b.loc.locate(machineID, pl, "")
	if err != nil {
		return fmt.Errorf("clear fence mark: %w", err)
	}
	err = h.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		md, err := meta.ReadOwned(dom, name, b.cfg.Provider, machineID)
		if err != nil {
			return err
		}
		if _, ok := md.Marks[shardID]; !ok {
			return nil
		}
		md.Marks = maps.Clone(md.Marks)
		delete(md.Marks, shardID)
		return meta.Write(dom, md)
	})
	if err != nil {
		return fmt.Errorf("clear fence mark: %w", err)
	}
	return nil
}
