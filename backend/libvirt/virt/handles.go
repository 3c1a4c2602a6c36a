package virt

import (
	"errors"

	"libvirt.org/go/libvirt"
)

// The backend talks to libvirt only through these interfaces: the methods
// it uses, nothing more. The real path is a thin adapter over the cgo
// bindings (lvConnect, lvStoragePool; *libvirt.Domain and
// *libvirt.StorageVol fit as they are). The backend's tests wrap the real
// adapter to inject faults at any call (backend/libvirt/faults_test.go,
// through Config.Dial), so every step of a transition can be made to fail
// the way a daemon or a link does.
//
// Handles are freed exactly as with the bindings: every Domain, Pool
// and Volume a method returns is the caller's to Free.

// Conn is one connection to a libvirt daemon.
type Conn interface {
	// Reference counting and liveness (host.go).
	Ref() error
	Close() (int, error)
	IsAlive() (bool, error)
	RegisterCloseCallback(cb func(reason libvirt.ConnectCloseReason)) error
	UnregisterCloseCallback() error
	// SetKeepAlive turns libvirt's own keepalive on (keepalive.go).
	SetKeepAlive(interval int, count uint) error

	// The host (capabilities at connect, Hosts()).
	GetCapabilities() (string, error)
	GetLibVersion() (uint32, error)
	GetVersion() (uint32, error)
	NumOfDomains() (int, error)
	NumOfDefinedDomains() (int, error)
	// The host's size, for placement (size.go).
	GetNodeInfo() (*libvirt.NodeInfo, error)
	GetFreeMemory() (uint64, error)
	// What the host offers the machine shapes of instance types
	// (backend/libvirt/shapes.go): firmware, huge pages, networks.
	GetDomainCapabilities(emulatorbin, arch, machine, virttype string, flags libvirt.ConnectGetDomainCapabilitiesFlags) (string, error)
	GetFreePages(pageSizes []uint64, startCell int, maxCells uint, flags uint32) ([]uint64, error)
	ListNetworks() ([]string, error)

	// Domains.
	LookupDomainByName(name string) (Domain, error)
	ListAllDomains(flags libvirt.ConnectListAllDomainsFlags) ([]Domain, error)
	DomainDefineXML(xml string) (Domain, error)
	DomainCreateXML(xml string, flags libvirt.DomainCreateFlags) (Domain, error)

	// Storage.
	LookupStoragePoolByName(name string) (Pool, error)
	// UploadVolume streams data into vol from offset 0 (a stream, the
	// upload and its chunks as one call: the backend never keeps a stream).
	UploadVolume(vol Volume, data []byte) error

	// Migrate3 live-migrates dom, a domain of this connection, to dst
	// (virDomainMigrate3, managed: this process drives both daemons) and
	// returns the domain's handle on dst.
	Migrate3(dom Domain, dst Conn, params *libvirt.DomainMigrateParameters, flags libvirt.DomainMigrateFlags) (Domain, error)
}

// Domain is one domain handle.
type Domain interface {
	Ref() error
	Free() error
	GetName() (string, error)
	GetState() (libvirt.DomainState, int, error)
	IsActive() (bool, error)
	GetMetadata(typ libvirt.DomainMetadataType, uri string, flags libvirt.DomainModificationImpact) (string, error)
	SetMetadata(typ libvirt.DomainMetadataType, content, key, uri string, flags libvirt.DomainModificationImpact) error
	Create() error
	Destroy() error
	Undefine() error
	UndefineFlags(flags libvirt.DomainUndefineFlagsValues) error
	QemuAgentCommand(cmd string, timeout libvirt.DomainQemuAgentCommandTimeout, flags uint32) (string, error)
	// For live migration (backend/libvirt/migrate.go).
	GetXMLDesc(flags libvirt.DomainXMLFlags) (string, error)
	AbortJob() error
	// For the recovery of a migration cut by a crash (migrecover.go).
	GetJobInfo() (*libvirt.DomainJobInfo, error)
	Resume() error
}

// Pool is one storage pool handle.
type Pool interface {
	Ref() error
	Free() error
	GetInfo() (*libvirt.StoragePoolInfo, error)
	LookupStorageVolByName(name string) (Volume, error)
	StorageVolCreateXML(xml string, flags libvirt.StorageVolCreateFlags) (Volume, error)
	// VolumeNames names every volume of the pool (one RPC).
	VolumeNames() ([]string, error)
}

// Volume is one storage volume handle.
type Volume interface {
	Ref() error
	Free() error
	GetPath() (string, error)
	GetInfo() (*libvirt.StorageVolInfo, error)
	GetXMLDesc(flags uint32) (string, error)
	Delete(flags libvirt.StorageVolDeleteFlags) error
}

var (
	_ Domain = (*libvirt.Domain)(nil)
	_ Volume = (*libvirt.StorageVol)(nil)
)

// DialFunc opens a connection; tests replace Dial with one that wraps it.
type DialFunc func(uri string) (Conn, error)

// Dial opens a real connection.
func Dial(uri string) (Conn, error) {
	c, err := libvirt.NewConnect(uri)
	if err != nil {
		return nil, err
	}
	return &lvConnect{c: c}, nil
}

// Wrap adapts a connection opened with the bindings (a fault injector's
// shared connection, a test's own).
func Wrap(c *libvirt.Connect) Conn { return &lvConnect{c: c} }

// WrapPool adapts a storage pool handle of the bindings.
func WrapPool(p *libvirt.StoragePool) Pool { return &lvStoragePool{p: p} }

// Libvirt returns the bindings' connection under c when c is the real
// adapter itself (not a wrapper of it), else nil: tests inspect a host
// through it, never through the call bounds or injected faults.
func Libvirt(c Conn) *libvirt.Connect {
	if x, ok := c.(*lvConnect); ok {
		return x.c
	}
	return nil
}

// lvConnect adapts *libvirt.Connect. Methods returning handles never wrap
// a nil pointer in a non-nil interface.
type lvConnect struct{ c *libvirt.Connect }

func (c *lvConnect) Ref() error                     { return c.c.Ref() }
func (c *lvConnect) Close() (int, error)            { return c.c.Close() }
func (c *lvConnect) IsAlive() (bool, error)         { return c.c.IsAlive() }
func (c *lvConnect) UnregisterCloseCallback() error { return c.c.UnregisterCloseCallback() }
func (c *lvConnect) SetKeepAlive(interval int, count uint) error {
	return c.c.SetKeepAlive(interval, count)
}
func (c *lvConnect) GetCapabilities() (string, error)        { return c.c.GetCapabilities() }
func (c *lvConnect) GetLibVersion() (uint32, error)          { return c.c.GetLibVersion() }
func (c *lvConnect) GetVersion() (uint32, error)             { return c.c.GetVersion() }
func (c *lvConnect) NumOfDomains() (int, error)              { return c.c.NumOfDomains() }
func (c *lvConnect) NumOfDefinedDomains() (int, error)       { return c.c.NumOfDefinedDomains() }
func (c *lvConnect) GetNodeInfo() (*libvirt.NodeInfo, error) { return c.c.GetNodeInfo() }
func (c *lvConnect) GetFreeMemory() (uint64, error)          { return c.c.GetFreeMemory() }
func (c *lvConnect) GetDomainCapabilities(emulatorbin, arch, machine, virttype string, flags libvirt.ConnectGetDomainCapabilitiesFlags) (string, error) {
	return c.c.GetDomainCapabilities(emulatorbin, arch, machine, virttype, flags)
}
func (c *lvConnect) GetFreePages(pageSizes []uint64, startCell int, maxCells uint, flags uint32) ([]uint64, error) {
	return c.c.GetFreePages(pageSizes, startCell, maxCells, flags)
}
func (c *lvConnect) ListNetworks() ([]string, error) { return c.c.ListNetworks() }

func (c *lvConnect) RegisterCloseCallback(cb func(reason libvirt.ConnectCloseReason)) error {
	return c.c.RegisterCloseCallback(func(_ *libvirt.Connect, reason libvirt.ConnectCloseReason) { cb(reason) })
}

func domainOrNil(d *libvirt.Domain, err error) (Domain, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (c *lvConnect) LookupDomainByName(name string) (Domain, error) {
	return domainOrNil(c.c.LookupDomainByName(name))
}

func (c *lvConnect) DomainDefineXML(xml string) (Domain, error) {
	return domainOrNil(c.c.DomainDefineXML(xml))
}

func (c *lvConnect) DomainCreateXML(xml string, flags libvirt.DomainCreateFlags) (Domain, error) {
	return domainOrNil(c.c.DomainCreateXML(xml, flags))
}

func (c *lvConnect) ListAllDomains(flags libvirt.ConnectListAllDomainsFlags) ([]Domain, error) {
	doms, err := c.c.ListAllDomains(flags)
	if err != nil {
		return nil, err
	}
	out := make([]Domain, len(doms))
	for i := range doms {
		out[i] = &doms[i]
	}
	return out, nil
}

func (c *lvConnect) LookupStoragePoolByName(name string) (Pool, error) {
	p, err := c.c.LookupStoragePoolByName(name)
	if err != nil {
		return nil, err
	}
	return &lvStoragePool{p: p}, nil
}

var errNotLibvirtVolume = errors.New("upload: volume handle is not libvirt's")

func (c *lvConnect) UploadVolume(vol Volume, data []byte) error {
	v, ok := vol.(*libvirt.StorageVol)
	if !ok {
		return errNotLibvirtVolume
	}
	st, err := c.c.NewStream(0)
	if err != nil {
		return err
	}
	defer st.Free()
	if err := v.Upload(st, 0, uint64(len(data)), 0); err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n, err := st.Send(data[off:min(off+256<<10, len(data))])
		if err != nil {
			_ = st.Abort()
			return err
		}
		off += n
	}
	return st.Finish()
}

var errNotLibvirtHandle = errors.New("migrate: handle is not libvirt's")

func (c *lvConnect) Migrate3(dom Domain, dst Conn, params *libvirt.DomainMigrateParameters, flags libvirt.DomainMigrateFlags) (Domain, error) {
	d, ok := dom.(*libvirt.Domain)
	dc, ok2 := dst.(*lvConnect)
	if !ok || !ok2 {
		return nil, errNotLibvirtHandle
	}
	return domainOrNil(d.Migrate3(dc.c, params, flags))
}

// lvStoragePool adapts *libvirt.StoragePool.
type lvStoragePool struct{ p *libvirt.StoragePool }

func (p *lvStoragePool) Free() error                                { return p.p.Free() }
func (p *lvStoragePool) Ref() error                                 { return p.p.Ref() }
func (p *lvStoragePool) GetInfo() (*libvirt.StoragePoolInfo, error) { return p.p.GetInfo() }

func volumeOrNil(v *libvirt.StorageVol, err error) (Volume, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (p *lvStoragePool) LookupStorageVolByName(name string) (Volume, error) {
	return volumeOrNil(p.p.LookupStorageVolByName(name))
}

func (p *lvStoragePool) StorageVolCreateXML(xml string, flags libvirt.StorageVolCreateFlags) (Volume, error) {
	return volumeOrNil(p.p.StorageVolCreateXML(xml, flags))
}

func (p *lvStoragePool) VolumeNames() ([]string, error) {
	vols, err := p.p.ListAllStorageVolumes(0)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(vols))
	for i := range vols {
		n, err := vols[i].GetName()
		_ = vols[i].Free()
		if err == nil {
			names = append(names, n)
		}
	}
	return names, nil
}
