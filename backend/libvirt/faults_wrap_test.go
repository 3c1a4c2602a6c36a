package libvirt

import (
	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// The wrapped methods of faults_test.go's injector, one per method of the
// lv* interfaces. Callbacks pass through untouched; reference counting
// passes through and is also counted per wrapper, so a call made after
// the last reference was closed is caught (as libvirt would crash on it).

func (c *faultConn) Ref() error {
	c.refs.Add(1)
	return c.inner.Ref()
}

func (c *faultConn) Close() (int, error) {
	if n := c.refs.Add(-1); n < 0 {
		c.f.t.Errorf("connection closed more often than referenced (%d)", n)
	}
	return c.inner.Close()
}

func (c *faultConn) SetKeepAlive(interval int, count uint) error {
	return c.do("conn.SetKeepAlive", "", func() error { return c.inner.SetKeepAlive(interval, count) })
}

func (c *faultConn) IsAlive() (bool, error) {
	if c.dead.Load() {
		return false, nil
	}
	return c.inner.IsAlive()
}

func (c *faultConn) RegisterCloseCallback(cb func(libvirt.ConnectCloseReason)) error {
	c.mu.Lock()
	c.cb = cb
	c.mu.Unlock()
	return nil // the injector fires it on a drop; the shared real connection never closes under a test
}

func (c *faultConn) UnregisterCloseCallback() error {
	c.mu.Lock()
	c.cb = nil
	c.mu.Unlock()
	return nil
}

func (c *faultConn) GetCapabilities() (string, error) {
	s, err := c.str("conn.GetCapabilities", "", c.inner.GetCapabilities)
	if err == nil && c.f.caps != nil {
		s = c.f.caps(s)
	}
	if err == nil && c.f.capsOf != nil {
		s = c.f.capsOf(c.uri, s)
	}
	return s, err
}

func (c *faultConn) GetLibVersion() (v uint32, err error) {
	err = c.do("conn.GetLibVersion", "", func() (err error) { v, err = c.inner.GetLibVersion(); return err })
	return v, err
}

func (c *faultConn) GetVersion() (v uint32, err error) {
	err = c.do("conn.GetVersion", "", func() (err error) { v, err = c.inner.GetVersion(); return err })
	return v, err
}

func (c *faultConn) NumOfDomains() (n int, err error) {
	err = c.do("conn.NumOfDomains", "", func() (err error) { n, err = c.inner.NumOfDomains(); return err })
	return n, err
}

func (c *faultConn) NumOfDefinedDomains() (n int, err error) {
	err = c.do("conn.NumOfDefinedDomains", "", func() (err error) { n, err = c.inner.NumOfDefinedDomains(); return err })
	return n, err
}

func (c *faultConn) GetNodeInfo() (n *libvirt.NodeInfo, err error) {
	err = c.do("conn.GetNodeInfo", "", func() (err error) { n, err = c.inner.GetNodeInfo(); return err })
	return n, err
}

func (c *faultConn) GetFreeMemory() (n uint64, err error) {
	err = c.do("conn.GetFreeMemory", "", func() (err error) { n, err = c.inner.GetFreeMemory(); return err })
	return n, err
}

func (c *faultConn) GetDomainCapabilities(emulatorbin, arch, machine, virttype string, flags libvirt.ConnectGetDomainCapabilitiesFlags) (x string, err error) {
	err = c.do("conn.GetDomainCapabilities", "", func() (err error) {
		x, err = c.inner.GetDomainCapabilities(emulatorbin, arch, machine, virttype, flags)
		return err
	})
	return x, err
}

func (c *faultConn) GetFreePages(pageSizes []uint64, startCell int, maxCells uint, flags uint32) (n []uint64, err error) {
	err = c.do("conn.GetFreePages", "", func() (err error) { n, err = c.inner.GetFreePages(pageSizes, startCell, maxCells, flags); return err })
	return n, err
}

func (c *faultConn) ListNetworks() (n []string, err error) {
	err = c.do("conn.ListNetworks", "", func() (err error) { n, err = c.inner.ListNetworks(); return err })
	return n, err
}

// domain runs a call returning a domain handle; a handle made by a call
// whose reply is then "lost" is freed, as the caller never sees it.
func (c *faultConn) domain(op, name string, call func() (virt.Domain, error)) (virt.Domain, error) {
	var d virt.Domain
	err := c.do(op, name, func() (err error) { d, err = call(); return err })
	if err != nil {
		if d != nil {
			_ = d.Free()
		}
		return nil, err
	}
	return c.wrapDomain(d), nil
}

func (c *faultConn) wrapDomain(d virt.Domain) virt.Domain {
	name, _ := d.GetName()
	return &faultDomain{inner: d, c: c, name: name}
}

func (c *faultConn) LookupDomainByName(name string) (virt.Domain, error) {
	return c.domain("conn.LookupDomainByName", name, func() (virt.Domain, error) { return c.inner.LookupDomainByName(name) })
}

func (c *faultConn) DomainDefineXML(x string) (virt.Domain, error) {
	name := xmlName("conn.DomainDefineXML", x)
	c.f.noteMutation("conn.DomainDefineXML", name)
	return c.domain("conn.DomainDefineXML", name, func() (virt.Domain, error) { return c.inner.DomainDefineXML(x) })
}

func (c *faultConn) DomainCreateXML(x string, flags libvirt.DomainCreateFlags) (virt.Domain, error) {
	name := xmlName("conn.DomainCreateXML", x)
	c.f.noteMutation("conn.DomainCreateXML", name)
	return c.domain("conn.DomainCreateXML", name, func() (virt.Domain, error) { return c.inner.DomainCreateXML(x, flags) })
}

func (c *faultConn) ListAllDomains(flags libvirt.ConnectListAllDomainsFlags) ([]virt.Domain, error) {
	var doms []virt.Domain
	err := c.do("conn.ListAllDomains", "", func() (err error) { doms, err = c.inner.ListAllDomains(flags); return err })
	if err != nil {
		freeAll(doms)
		return nil, err
	}
	for i := range doms {
		doms[i] = c.wrapDomain(doms[i])
	}
	return doms, nil
}

func (c *faultConn) LookupStoragePoolByName(name string) (virt.Pool, error) {
	var p virt.Pool
	err := c.do("conn.LookupStoragePoolByName", name, func() (err error) { p, err = c.inner.LookupStoragePoolByName(name); return err })
	if err != nil {
		if p != nil {
			_ = p.Free()
		}
		return nil, err
	}
	return &faultPool{inner: p, c: c, name: name}, nil
}

// Migrate3 hands the real handles to the real connection (it needs
// libvirt's own), under the rule for "conn.Migrate3".
func (c *faultConn) Migrate3(dom virt.Domain, dst virt.Conn, params *libvirt.DomainMigrateParameters, flags libvirt.DomainMigrateFlags) (virt.Domain, error) {
	fd := dom.(*faultDomain)
	inner := dst
	if fc, ok := dst.(*faultConn); ok {
		inner = fc.inner
	}
	c.f.noteMutation("conn.Migrate3", fd.name)
	return c.domain("conn.Migrate3", fd.name, func() (virt.Domain, error) {
		if c.f.emulateM {
			return c.f.emulateMigrate(fd.inner, inner, params, flags)
		}
		return c.inner.Migrate3(fd.inner, inner, params, flags)
	})
}

// emulateMigrate does what a successful live migration leaves behind.
func (f *faults) emulateMigrate(dom virt.Domain, dst virt.Conn, params *libvirt.DomainMigrateParameters, flags libvirt.DomainMigrateFlags) (virt.Domain, error) {
	f.mu.Lock()
	f.migrated = append(f.migrated, flags)
	f.mu.Unlock()
	moved, err := dst.DomainDefineXML(params.DestXML)
	if err != nil {
		return nil, err
	}
	if err := moved.Create(); err != nil {
		_ = moved.Free()
		return nil, err
	}
	if err := dom.Destroy(); err != nil {
		_ = moved.Free()
		return nil, err
	}
	if err := dom.Undefine(); err != nil {
		_ = moved.Free()
		return nil, err
	}
	return moved, nil
}

func (c *faultConn) UploadVolume(vol virt.Volume, data []byte) error {
	fv := vol.(*faultVolume)
	c.f.noteMutation("conn.UploadVolume", fv.name)
	return c.do("conn.UploadVolume", fv.name, func() error {
		if !c.f.emulateU {
			return c.inner.UploadVolume(fv.inner, data)
		}
		c.f.mu.Lock()
		c.f.uploads[fv.name] = len(data)
		c.f.mu.Unlock()
		return nil
	})
}

// faultDomain is a domain handle of a faultConn.
type faultDomain struct {
	inner virt.Domain
	c     *faultConn
	name  string
}

func (d *faultDomain) Free() error { return d.inner.Free() }
func (d *faultDomain) Ref() error  { return d.inner.Ref() }

func (d *faultDomain) GetName() (string, error) {
	return d.c.str("dom.GetName", d.name, d.inner.GetName)
}

func (d *faultDomain) GetState() (st libvirt.DomainState, reason int, err error) {
	err = d.c.do("dom.GetState", d.name, func() (err error) { st, reason, err = d.inner.GetState(); return err })
	return st, reason, err
}

func (d *faultDomain) IsActive() (ok bool, err error) {
	err = d.c.do("dom.IsActive", d.name, func() (err error) { ok, err = d.inner.IsActive(); return err })
	return ok, err
}

func (d *faultDomain) GetMetadata(typ libvirt.DomainMetadataType, uri string, flags libvirt.DomainModificationImpact) (string, error) {
	return d.c.str("dom.GetMetadata", d.name, func() (string, error) { return d.inner.GetMetadata(typ, uri, flags) })
}

func (d *faultDomain) SetMetadata(typ libvirt.DomainMetadataType, content, key, uri string, flags libvirt.DomainModificationImpact) error {
	d.c.f.noteMutation("dom.SetMetadata", d.name)
	return d.c.do("dom.SetMetadata", d.name, func() error { return d.inner.SetMetadata(typ, content, key, uri, flags) })
}

func (d *faultDomain) mutate(op string, call func() error) error {
	d.c.f.noteMutation(op, d.name)
	return d.c.do(op, d.name, call)
}

func (d *faultDomain) Create() error  { return d.mutate("dom.Create", d.inner.Create) }
func (d *faultDomain) Destroy() error { return d.mutate("dom.Destroy", d.inner.Destroy) }
func (d *faultDomain) Undefine() error {
	return d.mutate("dom.Undefine", d.inner.Undefine)
}

func (d *faultDomain) UndefineFlags(flags libvirt.DomainUndefineFlagsValues) error {
	return d.mutate("dom.UndefineFlags", func() error { return d.inner.UndefineFlags(flags) })
}

func (d *faultDomain) QemuAgentCommand(cmd string, timeout libvirt.DomainQemuAgentCommandTimeout, flags uint32) (string, error) {
	return d.c.str("dom.QemuAgentCommand", d.name, func() (string, error) {
		if d.c.f.agent != nil {
			return d.c.f.agent(d.name, cmd)
		}
		return d.inner.QemuAgentCommand(cmd, timeout, flags)
	})
}

func (d *faultDomain) GetXMLDesc(flags libvirt.DomainXMLFlags) (string, error) {
	x, err := d.c.str("dom.GetXMLDesc", d.name, func() (string, error) { return d.inner.GetXMLDesc(flags) })
	if err == nil && d.c.f.domXML != nil {
		x = d.c.f.domXML(d.name, x)
	}
	return x, err
}

func (d *faultDomain) AbortJob() error { return d.mutate("dom.AbortJob", d.inner.AbortJob) }

func (d *faultDomain) Resume() error { return d.mutate("dom.Resume", d.inner.Resume) }

func (d *faultDomain) GetJobInfo() (ji *libvirt.DomainJobInfo, err error) {
	err = d.c.do("dom.GetJobInfo", d.name, func() (err error) { ji, err = d.inner.GetJobInfo(); return err })
	return ji, err
}

// faultPool is a storage pool handle of a faultConn.
type faultPool struct {
	inner virt.Pool
	c     *faultConn
	name  string
}

func (p *faultPool) Free() error { return p.inner.Free() }
func (p *faultPool) Ref() error  { return p.inner.Ref() }

func (p *faultPool) GetInfo() (info *libvirt.StoragePoolInfo, err error) {
	err = p.c.do("pool.GetInfo", p.name, func() (err error) { info, err = p.inner.GetInfo(); return err })
	return info, err
}

func (p *faultPool) volume(op, name string, call func() (virt.Volume, error)) (virt.Volume, error) {
	var v virt.Volume
	err := p.c.do(op, name, func() (err error) { v, err = call(); return err })
	if err != nil {
		if v != nil {
			_ = v.Free()
		}
		return nil, err
	}
	return &faultVolume{inner: v, c: p.c, name: name}, nil
}

func (p *faultPool) VolumeNames() (names []string, err error) {
	err = p.c.do("pool.VolumeNames", p.name, func() (err error) { names, err = p.inner.VolumeNames(); return err })
	return names, err
}

func (p *faultPool) LookupStorageVolByName(name string) (virt.Volume, error) {
	return p.volume("pool.LookupStorageVolByName", name, func() (virt.Volume, error) { return p.inner.LookupStorageVolByName(name) })
}

func (p *faultPool) StorageVolCreateXML(x string, flags libvirt.StorageVolCreateFlags) (virt.Volume, error) {
	name := xmlName("pool.StorageVolCreateXML", x)
	p.c.f.noteMutation("pool.StorageVolCreateXML", name)
	return p.volume("pool.StorageVolCreateXML", name, func() (virt.Volume, error) { return p.inner.StorageVolCreateXML(x, flags) })
}

// faultVolume is a storage volume handle of a faultConn.
type faultVolume struct {
	inner virt.Volume
	c     *faultConn
	name  string
}

func (v *faultVolume) Free() error { return v.inner.Free() }
func (v *faultVolume) Ref() error  { return v.inner.Ref() }

func (v *faultVolume) GetPath() (string, error) {
	return v.c.str("vol.GetPath", v.name, v.inner.GetPath)
}

func (v *faultVolume) GetInfo() (info *libvirt.StorageVolInfo, err error) {
	err = v.c.do("vol.GetInfo", v.name, func() (err error) { info, err = v.inner.GetInfo(); return err })
	return info, err
}

func (v *faultVolume) GetXMLDesc(flags uint32) (string, error) {
	return v.c.str("vol.GetXMLDesc", v.name, func() (string, error) {
		x, err := v.inner.GetXMLDesc(flags)
		v.c.f.mu.Lock()
		rw := v.c.f.volXML
		v.c.f.mu.Unlock()
		if err == nil && rw != nil {
			x = rw(v.name, x)
		}
		return x, err
	})
}

func (v *faultVolume) Delete(flags libvirt.StorageVolDeleteFlags) error {
	v.c.f.noteMutation("vol.Delete", v.name)
	return v.c.do("vol.Delete", v.name, func() error { return v.inner.Delete(flags) })
}

var (
	_ virt.Conn   = (*faultConn)(nil)
	_ virt.Domain = (*faultDomain)(nil)
	_ virt.Pool   = (*faultPool)(nil)
	_ virt.Volume = (*faultVolume)(nil)
)
