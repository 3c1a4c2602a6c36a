package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domstate"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/domxml"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/hostconn"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/meta"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/rollback"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/shapecheck"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/volume"
)

// Create builds and starts the machine's domain, or adopts the one a
// previous attempt made (starting it if it is off). A domain with the
// derived name that is not ours is never touched: backend.ErrNotOurs.
func (b *Backend) Create(ctx context.Context, spec backend.MachineSpec) (backend.Placement, error) {
	if spec.MachineID == "" {
		return backend.Placement{}, errors.New("create: empty machine id")
	}
	// The host is booked before any libvirt work, so concurrent Creates
	// never oversubscribe it; the booking is released if the work fails,
	// and otherwise stays until a listing sees the domain. A retried
	// Create finds its machine booked where it is and adopts it there.
	h, dec, err := b.loc.book(ctx, spec)
	if err != nil {
		return backend.Placement{}, err
	}
	name := meta.DomainName(b.cfg.Provider, spec.MachineID)
	pl := backend.Placement{Zone: h.zone, Host: h.refName(), Domain: name, Why: dec.Why}
	if err := h.Ready(); err != nil {
		// Nothing was asked of the host: the engine may place the
		// machine elsewhere if no earlier attempt reached this host.
		return backend.Placement{}, fmt.Errorf("create: %w: %w", backend.ErrNothingDone, err)
	}
	start := time.Now()
	err = h.With(func(conn virt.Conn) error {
		dom, err := conn.LookupDomainByName(name)
		if err == nil {
			err = b.builder.adopt(ctx, dom, name, spec)
			if !errors.Is(err, errDeleteBegun) && !errors.Is(err, errStaleSource) {
				_ = dom.Free()
				return err
			}
			err = b.builder.finishBegunDelete(ctx, conn, dom, name, spec)
			_ = dom.Free()
			if err != nil {
				return err
			}
			return b.builder.build(ctx, h, conn, name, spec)
		}
		if !isNoDomain(err) {
			return fmt.Errorf("create: look up domain: %w", err)
		}
		return b.builder.build(ctx, h, conn, name, spec)
	})
	if err != nil {
		// A fault of the link keeps the booking: the call may have taken
		// effect on this host (a domain defined, its rollback cut off),
		// so the engine's retry must come back here, never build a second
		// domain elsewhere. Any other failure frees the room.
		if !backend.IsTransient(err) {
			b.loc.plan.Release(h.zone, spec.MachineID)
		}
		return backend.Placement{}, err
	}
	b.log.Info("domain created", "zone", h.zone, "host", h.name, "domain", name, "machine", spec.MachineID,
		"op", spec.OperationID, "placement", dec.Why, "took", time.Since(start).Round(time.Millisecond).String())
	if b.cfg.WaitBooted {
		// IDLE means booted. The domain stays (and keeps its booking) when
		// the guest does not get there: the machine ends FAILED with the
		// cause, its console still there to read, and a Delete removes it.
		b.guests.StopWatch(spec.MachineID)
		if err := b.guests.AwaitBootedRunning(ctx, h.guest(name, spec.MachineID), "create"); err != nil {
			return backend.Placement{}, fmt.Errorf("create: %w", err)
		}
	}
	return pl, nil
}

// builder makes a machine's domain on the host a Create booked, or adopts
// the one an earlier attempt made: the libvirt work of Create, after
// placement.
type builder struct {
	cfg   *Config
	log   *slog.Logger
	store volume.Store
}

// adopt takes over our own domain left by an earlier attempt of this
// machine's Create, starting it if it is not running.
func (c *builder) adopt(ctx context.Context, dom virt.Domain, name string, spec backend.MachineSpec) error {
	md, err := meta.ReadOwned(dom, name, c.cfg.Provider, spec.MachineID)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if md.Delete.Begun() {
		return fmt.Errorf("create: domain %s: Delete %s began on it: %w", name, md.Delete.OperationID, errDeleteBegun)
	}
	st, reason, err := dom.GetState()
	if err != nil {
		return fmt.Errorf("create: adopt: state: %w", err)
	}
	if rs := domstate.Run(st, reason); rs.State == backend.RunShutoff && rs.Reason == "migrated" {
		return fmt.Errorf("create: domain %s is %s: %w", name, rs, errStaleSource)
	}
	active, err := dom.IsActive()
	if err != nil {
		return fmt.Errorf("create: adopt: state: %w", err)
	}
	if !active {
		if err := dom.Create(); err != nil {
			return fmt.Errorf("create: adopt: start domain: %w", err)
		}
	}
	if err := domstate.WaitRunning(ctx, dom); err != nil {
		return fmt.Errorf("create: adopt: wait running: %w", err)
	}
	c.log.Info("adopted existing domain", "domain", name, "machine", spec.MachineID, "was_running", active)
	return nil
}

// errDeleteBegun: the domain a Create found carries a Delete's intent (a
// Delete cut short, then the state file lost). Adopting it would bring
// back what BigFleet deleted, binding and all; it is deleted first.
var errDeleteBegun = errors.New("a Delete was begun on the domain")

// errStaleSource: the domain a Create found is a live migration's source
// that handed the guest over ("shut off (migrated)"): its disk is behind
// the guest's, and the guest may run elsewhere. It is never started; it
// is deleted and the Create builds afresh (issue 38).
var errStaleSource = errors.New("a migration's stale source")

// finishBegunDelete completes the Delete whose intent dom carries (domain
// and volumes), so the Create builds afresh; a WARN says so.
func (c *builder) finishBegunDelete(ctx context.Context, conn virt.Conn, dom virt.Domain, name string, spec backend.MachineSpec) error {
	c.log.Warn("create: the domain found is not to be adopted (a Delete begun on it, or a migration's stale source); deleting it before building",
		"domain", name, "machine", spec.MachineID, "op", spec.OperationID)
	if err := destroyAndUndefine(dom); err != nil {
		return fmt.Errorf("create: finish the begun Delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	for _, vol := range []string{meta.OverlayName(name), meta.SeedName(name)} {
		if err := c.store.DeleteIn(conn, vol); err != nil {
			return fmt.Errorf("create: finish the begun Delete: volume %s: %w", vol, err)
		}
	}
	return nil
}

// attempt is one Create that builds a domain from scratch: what it made
// (undo) and how long each step took.
type attempt struct {
	ctx  context.Context
	conn virt.Conn
	name string
	undo rollback.Stack
	took []any
	mark time.Time
}

// step names a failing step in its error ("create: define domain: ..."),
// and times the good ones (logged at debug: where a slow Create goes).
func (a *attempt) step(what string, err error) error {
	if err == nil {
		err = a.ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("create: %s: %w", what, err)
	}
	a.took = append(a.took, slog.String(strings.ReplaceAll(what, " ", "_"), time.Since(a.mark).Round(time.Millisecond).String()))
	a.mark = time.Now()
	return nil
}

// build makes the volumes and the domain. Every piece it creates is pushed
// on undo; on failure exactly those are removed, newest first. Undo steps
// look their object up again by name on conn (which outlives build), since
// the handles used here are freed before the rollback runs.
func (c *builder) build(ctx context.Context, h *host, conn virt.Conn, name string, spec backend.MachineSpec) error {
	a := &attempt{ctx: ctx, conn: conn, name: name, mark: time.Now()}
	err := c.buildSteps(a, h, spec)
	var late *hostconn.CallTimeoutError
	if errors.As(err, &late) {
		// The call past its bound may still take effect on the host
		// after an undo here (a domain defined after its undefine, over
		// an overlay already deleted). Leave the pieces: the retry adopts
		// them, and a Create that fails for good is cleaned up by Delete.
		return err
	}
	if err != nil {
		if rerr := a.undo.Run(c.log.With("domain", name)); rerr != nil {
			err = fmt.Errorf("%w (rollback incomplete: %v)", err, rerr)
		}
		return err
	}
	c.log.Debug("create steps", append([]any{"domain", name}, a.took...)...)
	return nil
}

func (c *builder) buildSteps(a *attempt, h *host, spec backend.MachineSpec) error {
	sh := c.shapeOf(spec)
	if probe := sh; shapecheck.NeedsProbe(probe) {
		probe.DiskGiB = 0 // checked against the golden image buildVolumes reads anyway
		if err := a.step("instance type shape", c.checkShapeOn(h, a.conn, spec, probe)); err != nil {
			return err
		}
	}
	overlay, seed, err := c.buildVolumes(a, spec.InstanceType, sh)
	if err != nil {
		return err
	}
	// Both undo steps go on before their call, not after it succeeds: a
	// define or a start whose reply was lost (the link dropped mid-call)
	// may have taken effect. They act only on a domain that is ours.
	a.undo.Push("undefine domain", func() error { return onOwnDomain(a.conn, a.name, c.cfg.Provider, spec.MachineID, domstate.Undefine) })
	dom, err := c.define(h, a.conn, a.name, spec, overlay, seed)
	if dom != nil {
		defer dom.Free()
	}
	if err := a.step("define domain", err); err != nil {
		return err
	}
	a.undo.Push("destroy domain", func() error { return onOwnDomain(a.conn, a.name, c.cfg.Provider, spec.MachineID, domstate.Destroy) })
	started, err := c.start(a, h, dom, spec, overlay, seed)
	if started != nil && started != dom {
		defer started.Free()
	}
	if err := a.step("start domain", err); err != nil {
		return err
	}
	return a.step("wait running", h.ExplainStart(a.name, domstate.WaitRunning(a.ctx, started)))
}

// shapeOf is the shape of the machine's instance type (zero for a type
// without one, or one the backend was not told about).
func (c *builder) shapeOf(spec backend.MachineSpec) backend.Shape {
	return c.cfg.Shapes[spec.InstanceType]
}

// CheckShapes checks every instance type's shape against every host that
// is connected (waiting for each host's first connection attempt, within
// ctx): the firmware files, TPM emulation, huge pages, networks and the
// golden image's size the shapes need. A host that is not connected is
// not checked here: a Create on it then fails with the same message. An
// error names the instance type, the field and the host.
func (b *Backend) CheckShapes(ctx context.Context) error {
	if !slices.ContainsFunc(slices.Collect(maps.Values(b.cfg.Shapes)), shapecheck.NeedsProbe) {
		return nil
	}
	b.AwaitFirstAttempts(ctx)
	var errs []error
	for _, h := range b.loc.list {
		if h.Ready() != nil {
			b.log.Warn("instance type shapes not checked on a host that is not connected; a Create there checks its own", "host", h.name)
			continue
		}
		err := h.With(func(conn virt.Conn) error {
			o, err := shapecheck.Probe(conn, h.DomainType().Type, b.cfg.Pool, b.cfg.Image, b.cfg.Shapes)
			if err != nil {
				return fmt.Errorf("--instance-types: probing host %s for the machine shapes: %w", h.name, err)
			}
			return shapecheck.Check(h.name, b.cfg.Shapes, b.cfg.ShapeMemoryMiB, b.cfg.Network, o)
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkShapeOn is CheckShapes for one Create's shape on its host.
func (c *builder) checkShapeOn(h *host, conn virt.Conn, spec backend.MachineSpec, s backend.Shape) error {
	one := map[string]backend.Shape{spec.InstanceType: s}
	o, err := shapecheck.Probe(conn, h.DomainType().Type, c.cfg.Pool, c.cfg.Image, one)
	if err != nil {
		return err
	}
	return shapecheck.Check(h.name, one, map[string]int{spec.InstanceType: spec.MemoryMiB}, c.cfg.Network, o)
}

// start starts the defined domain and returns the handle of the domain it
// started. Under --domain-type=auto, a kvm guest that QEMU cannot start
// because it cannot use KVM switches the host to qemu (TCG), and the
// domain is redefined and started again: the Create goes on rather than
// failing. Any start failure carries the last error line of the domain's
// QEMU log when the host is local.
func (c *builder) start(a *attempt, h *host, dom virt.Domain, spec backend.MachineSpec, overlay, seed string) (virt.Domain, error) {
	err := dom.Create()
	if err == nil || !hostconn.IsKVMUnusable(err) || !h.FallBackToQEMU(message(err)) {
		return dom, h.ExplainStart(a.name, err)
	}
	// libvirt refuses a second definition of a name under another UUID,
	// so the kvm definition goes first (nothing runs under it).
	if err := domstate.Undefine(dom); err != nil {
		return dom, fmt.Errorf("undefine the kvm definition to redefine as qemu: %w", err)
	}
	again, err := c.define(h, a.conn, a.name, spec, overlay, seed)
	if err != nil {
		return nil, fmt.Errorf("redefine as qemu after kvm failed: %w", err)
	}
	return again, h.ExplainStart(a.name, again.Create())
}

// buildVolumes makes (or reuses) the overlay and the optional seed and
// returns their paths.
func (c *builder) buildVolumes(a *attempt, typeName string, sh backend.Shape) (overlay, seed string, err error) {
	pool, err := a.conn.LookupStoragePoolByName(c.cfg.Pool)
	if err != nil {
		err = fmt.Errorf("%s: %w", c.cfg.Pool, err)
	}
	if err := a.step("storage pool", err); err != nil {
		return "", "", err
	}
	defer pool.Free()
	g, err := volume.ReadGolden(pool, c.cfg.Image)
	if err := a.step("golden image", err); err != nil {
		return "", "", err
	}
	if g, err = shapecheck.Sized(g, typeName, sh); err != nil {
		return "", "", fmt.Errorf("create: overlay volume: %w", err)
	}
	ovName := meta.OverlayName(a.name)
	if ovName == c.cfg.Image {
		return "", "", fmt.Errorf("create: overlay volume: name %q: %w", ovName, volume.ErrGolden)
	}
	overlay, created, err := volume.EnsureOverlay(pool, ovName, g)
	if created {
		a.undo.Push("delete overlay volume", func() error { return c.store.DeleteIn(a.conn, ovName) })
	}
	if err := a.step("overlay volume", err); err != nil {
		return "", "", err
	}
	seed, err = c.store.EnsureSeed(a.conn, pool, meta.SeedName(a.name), a.name, &a.undo)
	if err := a.step("seed volume", err); err != nil {
		return "", "", err
	}
	return overlay, seed, nil
}

// define renders the domain XML and defines it.
func (c *builder) define(h *host, conn virt.Conn, name string, spec backend.MachineSpec,
	overlay, seed string) (virt.Domain, error) {
	md, err := meta.Stamped(meta.Metadata{Provider: c.cfg.Provider, MachineID: spec.MachineID, OperationID: spec.OperationID,
		Marks: spec.Marks, Host: h.refName(), VCPUs: max(spec.VCPU, 1), MemoryMiB: max(spec.MemoryMiB, 64)}).Marshal(true)
	if err != nil {
		return nil, err
	}
	hostType := h.DomainType().Type
	shape := c.shapeOf(spec)
	d := domxml.Build(domxml.Params{
		Name: name, Type: hostType, VCPU: max(spec.VCPU, 1), MemoryMiB: max(spec.MemoryMiB, 64),
		Overlay: overlay, OverlayFmt: "qcow2", Seed: seed, NICs: domxml.ResolvedNICs(shape, c.cfg.Network),
		Kernel: c.cfg.Kernel, Initrd: c.cfg.Initrd, Cmdline: c.cfg.Cmdline, Metadata: md, Shape: shape,
	})
	if err := c.policyFor(hostType, overlay, seed, shape).Check(d); err != nil {
		return nil, err
	}
	x, err := d.Marshal()
	if err != nil {
		return nil, fmt.Errorf("render xml: %w", err)
	}
	return conn.DomainDefineXML(x)
}

// policyFor is the policy of one Create: the host's domain type (kvm or
// qemu on a real host), its own volumes, the instance type's shape and
// NICs (or --network) and the configured boot files.
func (c *builder) policyFor(hostType, overlay, seed string, shape backend.Shape) domxml.Policy {
	files := []string{overlay}
	if seed != "" {
		files = append(files, seed)
	}
	return domxml.Policy{
		Types: []string{hostType}, Files: files, NICs: domxml.ResolvedNICs(shape, c.cfg.Network),
		Kernel: c.cfg.Kernel, Initrd: c.cfg.Initrd, Cmdline: c.cfg.Cmdline, Shape: shape,
	}
}
