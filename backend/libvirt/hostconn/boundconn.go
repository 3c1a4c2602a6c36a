package hostconn

import (
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// boundConn, boundDomain, boundPool and boundVolume put every RPC of the
// handles they wrap under bounded (bound.go). Calls that stay inside the
// client library (reference counting, IsAlive, Free, a domain's name) are
// passed straight through. Handles they return are wrapped too; the
// real handles go back to libvirt unwrapped where it needs its own
// (Migrate3, UploadVolume).
type boundConn struct {
	h     *Host
	cs    *callSlots // the connection's call slots (bound.go)
	inner virt.Conn
	extra time.Duration // on top of every call's bound (connect's budget)
}

func (c *boundConn) Ref() error             { return c.inner.Ref() }
func (c *boundConn) Close() (int, error)    { return c.inner.Close() }
func (c *boundConn) IsAlive() (bool, error) { return c.inner.IsAlive() }
func (c *boundConn) RegisterCloseCallback(cb func(reason libvirt.ConnectCloseReason)) error {
	return c.inner.RegisterCloseCallback(cb)
}
func (c *boundConn) UnregisterCloseCallback() error { return c.inner.UnregisterCloseCallback() }
func (c *boundConn) SetKeepAlive(interval int, count uint) error {
	return do(c.h, c.cs, c.inner, "SetKeepAlive", c.extra, func() error { return c.inner.SetKeepAlive(interval, count) })
}

func (c *boundConn) GetCapabilities() (string, error) {
	return bounded(c.h, c.cs, c.inner, "GetCapabilities", c.extra, c.inner.GetCapabilities)
}
func (c *boundConn) GetLibVersion() (uint32, error) {
	return bounded(c.h, c.cs, c.inner, "GetLibVersion", c.extra, c.inner.GetLibVersion)
}
func (c *boundConn) GetVersion() (uint32, error) {
	return bounded(c.h, c.cs, c.inner, "GetVersion", c.extra, c.inner.GetVersion)
}
func (c *boundConn) NumOfDomains() (int, error) {
	return bounded(c.h, c.cs, c.inner, "NumOfDomains", c.extra, c.inner.NumOfDomains)
}
func (c *boundConn) NumOfDefinedDomains() (int, error) {
	return bounded(c.h, c.cs, c.inner, "NumOfDefinedDomains", c.extra, c.inner.NumOfDefinedDomains)
}
func (c *boundConn) GetNodeInfo() (*libvirt.NodeInfo, error) {
	return bounded(c.h, c.cs, c.inner, "GetNodeInfo", c.extra, c.inner.GetNodeInfo)
}
func (c *boundConn) GetFreeMemory() (uint64, error) {
	return bounded(c.h, c.cs, c.inner, "GetFreeMemory", c.extra, c.inner.GetFreeMemory)
}
func (c *boundConn) GetDomainCapabilities(emulatorbin, arch, machine, virttype string, flags libvirt.ConnectGetDomainCapabilitiesFlags) (string, error) {
	return bounded(c.h, c.cs, c.inner, "GetDomainCapabilities", c.extra, func() (string, error) {
		return c.inner.GetDomainCapabilities(emulatorbin, arch, machine, virttype, flags)
	})
}
func (c *boundConn) GetFreePages(pageSizes []uint64, startCell int, maxCells uint, flags uint32) ([]uint64, error) {
	return bounded(c.h, c.cs, c.inner, "GetFreePages", c.extra, func() ([]uint64, error) {
		return c.inner.GetFreePages(pageSizes, startCell, maxCells, flags)
	})
}
func (c *boundConn) ListNetworks() ([]string, error) {
	return bounded(c.h, c.cs, c.inner, "ListNetworks", c.extra, c.inner.ListNetworks)
}

func (c *boundConn) domain(d virt.Domain, name string, err error) (virt.Domain, error) {
	if err != nil {
		return nil, err
	}
	return &boundDomain{h: c.h, cs: c.cs, inner: d, name: name, extra: c.extra}, nil
}

func (c *boundConn) LookupDomainByName(name string) (virt.Domain, error) {
	d, err := bounded(c.h, c.cs, c.inner, "LookupDomainByName "+name, c.extra, func() (virt.Domain, error) { return c.inner.LookupDomainByName(name) })
	return c.domain(d, name, err)
}

func (c *boundConn) ListAllDomains(flags libvirt.ConnectListAllDomainsFlags) ([]virt.Domain, error) {
	doms, err := bounded(c.h, c.cs, c.inner, "ListAllDomains", c.extra, func() ([]virt.Domain, error) { return c.inner.ListAllDomains(flags) })
	for i := range doms {
		doms[i] = &boundDomain{h: c.h, cs: c.cs, inner: doms[i], extra: c.extra}
	}
	return doms, err
}

func (c *boundConn) DomainDefineXML(xml string) (virt.Domain, error) {
	d, err := bounded(c.h, c.cs, c.inner, "DomainDefineXML", c.extra, func() (virt.Domain, error) { return c.inner.DomainDefineXML(xml) })
	return c.domain(d, "", err)
}

func (c *boundConn) DomainCreateXML(xml string, flags libvirt.DomainCreateFlags) (virt.Domain, error) {
	d, err := bounded(c.h, c.cs, c.inner, "DomainCreateXML", c.extra, func() (virt.Domain, error) { return c.inner.DomainCreateXML(xml, flags) })
	return c.domain(d, "", err)
}

func (c *boundConn) LookupStoragePoolByName(name string) (virt.Pool, error) {
	p, err := bounded(c.h, c.cs, c.inner, "LookupStoragePoolByName "+name, c.extra, func() (virt.Pool, error) { return c.inner.LookupStoragePoolByName(name) })
	if err != nil {
		return nil, err
	}
	return &boundPool{h: c.h, cs: c.cs, inner: p, name: name}, nil
}

func (c *boundConn) UploadVolume(vol virt.Volume, data []byte) error {
	ivol := unbound(vol) // referenced by the call too, like Migrate3's domain
	return do(c.h, c.cs, heldAll{c.inner, ivol}, "volume upload", c.extra, func() error { return c.inner.UploadVolume(ivol, data) })
}

// Migrate3 is bounded by the migration's own budget (the engine aborts the
// job at --migrate-timeout) on top of the call bound. The call runs on the
// domain and the destination's connection too, and holds a reference on
// each until it returns: abandoned at its bound, it outlives the caller's
// handles, and a domain freed or a destination link closed under it (the
// destination partitioned mid copy) crashed the process in libvirt.
func (c *boundConn) Migrate3(dom virt.Domain, dst virt.Conn, params *libvirt.DomainMigrateParameters, flags libvirt.DomainMigrateFlags) (virt.Domain, error) {
	inner := dst
	if bc, ok := dst.(*boundConn); ok {
		inner = bc.inner
	}
	idom := unbound(dom)
	on := heldAll{c.inner, idom, inner}
	d, err := bounded(c.h, c.cs, on, "Migrate3", c.h.cfg.MigrateTimeout, func() (virt.Domain, error) {
		return c.inner.Migrate3(idom, inner, params, flags)
	})
	if err != nil {
		return nil, err
	}
	if bc, ok := dst.(*boundConn); ok {
		return &boundDomain{h: bc.h, cs: bc.cs, inner: d}, nil
	}
	return d, nil
}

// unbound returns the handle a bound wrapper holds (or h itself).
func unbound[T any](h T) T {
	if u, ok := any(h).(interface{ unwrap() any }); ok {
		if inner, ok := u.unwrap().(T); ok {
			return inner
		}
	}
	return h
}

type boundDomain struct {
	h     *Host
	cs    *callSlots
	inner virt.Domain
	extra time.Duration
	name  string // "" when listed: GetName is local
}

func (d *boundDomain) unwrap() any              { return d.inner }
func (d *boundDomain) Free() error              { return d.inner.Free() }
func (d *boundDomain) Ref() error               { return d.inner.Ref() }
func (d *boundDomain) GetName() (string, error) { return d.inner.GetName() }
func (d *boundDomain) call(what string) string {
	if d.name == "" {
		if n, err := d.inner.GetName(); err == nil {
			d.name = n
		}
	}
	return what + " " + d.name
}

func (d *boundDomain) GetState() (libvirt.DomainState, int, error) {
	type st struct {
		s libvirt.DomainState
		r int
	}
	v, err := bounded(d.h, d.cs, d.inner, d.call("GetState"), d.extra, func() (st, error) {
		s, r, err := d.inner.GetState()
		return st{s, r}, err
	})
	return v.s, v.r, err
}

func (d *boundDomain) IsActive() (bool, error) {
	return bounded(d.h, d.cs, d.inner, d.call("IsActive"), d.extra, d.inner.IsActive)
}

func (d *boundDomain) GetMetadata(typ libvirt.DomainMetadataType, uri string, flags libvirt.DomainModificationImpact) (string, error) {
	return bounded(d.h, d.cs, d.inner, d.call("GetMetadata"), d.extra, func() (string, error) { return d.inner.GetMetadata(typ, uri, flags) })
}

func (d *boundDomain) SetMetadata(typ libvirt.DomainMetadataType, content, key, uri string, flags libvirt.DomainModificationImpact) error {
	return do(d.h, d.cs, d.inner, d.call("SetMetadata"), d.extra, func() error { return d.inner.SetMetadata(typ, content, key, uri, flags) })
}

func (d *boundDomain) Create() error {
	return do(d.h, d.cs, d.inner, d.call("Create"), d.extra, d.inner.Create)
}
func (d *boundDomain) Destroy() error {
	return do(d.h, d.cs, d.inner, d.call("Destroy"), d.extra, d.inner.Destroy)
}
func (d *boundDomain) Undefine() error {
	return do(d.h, d.cs, d.inner, d.call("Undefine"), d.extra, d.inner.Undefine)
}
func (d *boundDomain) UndefineFlags(flags libvirt.DomainUndefineFlagsValues) error {
	return do(d.h, d.cs, d.inner, d.call("Undefine"), d.extra, func() error { return d.inner.UndefineFlags(flags) })
}

// QemuAgentCommand is bounded by the agent's own timeout on top of the
// call bound: the daemon waits that long for the guest.
func (d *boundDomain) QemuAgentCommand(cmd string, timeout libvirt.DomainQemuAgentCommandTimeout, flags uint32) (string, error) {
	extra := d.h.cfg.AgentTimeout
	if timeout > 0 {
		extra = time.Duration(timeout) * time.Second
	}
	return bounded(d.h, d.cs, d.inner, d.call("QemuAgentCommand"), extra, func() (string, error) { return d.inner.QemuAgentCommand(cmd, timeout, flags) })
}

func (d *boundDomain) GetXMLDesc(flags libvirt.DomainXMLFlags) (string, error) {
	return bounded(d.h, d.cs, d.inner, d.call("GetXMLDesc"), d.extra, func() (string, error) { return d.inner.GetXMLDesc(flags) })
}

func (d *boundDomain) AbortJob() error {
	return do(d.h, d.cs, d.inner, d.call("AbortJob"), d.extra, d.inner.AbortJob)
}

func (d *boundDomain) GetJobInfo() (*libvirt.DomainJobInfo, error) {
	return bounded(d.h, d.cs, d.inner, d.call("GetJobInfo"), d.extra, d.inner.GetJobInfo)
}

func (d *boundDomain) Resume() error {
	return do(d.h, d.cs, d.inner, d.call("Resume"), d.extra, d.inner.Resume)
}

type boundPool struct {
	h     *Host
	cs    *callSlots
	inner virt.Pool
	name  string
}

func (p *boundPool) Free() error { return p.inner.Free() }
func (p *boundPool) Ref() error  { return p.inner.Ref() }
func (p *boundPool) GetInfo() (*libvirt.StoragePoolInfo, error) {
	return bounded(p.h, p.cs, p.inner, "pool GetInfo "+p.name, 0, p.inner.GetInfo)
}

func (p *boundPool) LookupStorageVolByName(name string) (virt.Volume, error) {
	v, err := bounded(p.h, p.cs, p.inner, "LookupStorageVolByName "+name, 0, func() (virt.Volume, error) { return p.inner.LookupStorageVolByName(name) })
	if err != nil {
		return nil, err
	}
	return &boundVolume{h: p.h, cs: p.cs, inner: v, name: name}, nil
}

func (p *boundPool) StorageVolCreateXML(xml string, flags libvirt.StorageVolCreateFlags) (virt.Volume, error) {
	v, err := bounded(p.h, p.cs, p.inner, "StorageVolCreateXML", 0, func() (virt.Volume, error) { return p.inner.StorageVolCreateXML(xml, flags) })
	if err != nil {
		return nil, err
	}
	return &boundVolume{h: p.h, cs: p.cs, inner: v}, nil
}

type boundVolume struct {
	h     *Host
	cs    *callSlots
	inner virt.Volume
	name  string
}

func (v *boundVolume) unwrap() any { return v.inner }
func (v *boundVolume) Free() error { return v.inner.Free() }
func (v *boundVolume) Ref() error  { return v.inner.Ref() }
func (v *boundVolume) GetPath() (string, error) {
	return bounded(v.h, v.cs, v.inner, "volume GetPath "+v.name, 0, v.inner.GetPath)
}
func (v *boundVolume) GetInfo() (*libvirt.StorageVolInfo, error) {
	return bounded(v.h, v.cs, v.inner, "volume GetInfo "+v.name, 0, v.inner.GetInfo)
}
func (v *boundVolume) GetXMLDesc(flags uint32) (string, error) {
	return bounded(v.h, v.cs, v.inner, "volume GetXMLDesc "+v.name, 0, func() (string, error) { return v.inner.GetXMLDesc(flags) })
}
func (v *boundVolume) Delete(flags libvirt.StorageVolDeleteFlags) error {
	return do(v.h, v.cs, v.inner, "volume Delete "+v.name, 0, func() error { return v.inner.Delete(flags) })
}

func (p *boundPool) VolumeNames() ([]string, error) {
	return bounded(p.h, p.cs, p.inner, "pool VolumeNames "+p.name, 0, p.inner.VolumeNames)
}

// Unwrap returns the connection a host's call bounds wrap (Acquire's
// result), or c itself.
func Unwrap(c virt.Conn) virt.Conn {
	if bc, ok := c.(*boundConn); ok {
		return bc.inner
	}
	return c
}
