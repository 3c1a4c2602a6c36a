package libvirt

import "github.com/bigfleet/libvirt-provider/backend"

// HostLinks is each host's link and declaration as Hosts reports them,
// without calling any host (backend.HostLinker): the connection's own
// state and last error, capacity from the last read.
func (b *Backend) HostLinks() []backend.HostStatus {
	out := make([]backend.HostStatus, 0, len(b.loc.list))
	for _, h := range b.loc.list {
		st := h.baseStatus()
		st.DownReason, st.Down = b.loc.down.reason(st.Name)
		out = append(out, st)
	}
	return out
}
