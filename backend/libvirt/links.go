package libvirt

import "github.com/bigfleet/libvirt-provider/backend"

// HostLinks is each host's link and declaration as Hosts reports them,
// without calling any host (backend.HostLinker): the connection's own
// state and last error, capacity from the last read.
func (b *Backend) HostLinks() []backend.HostStatus {
	out := make([]backend.HostStatus, 0, len(b.list))
	for _, h := range b.list {
		st := h.baseStatus()
		st.DownReason, st.Down = b.down.reason(st.Name)
		out = append(out, st)
	}
	return out
}
