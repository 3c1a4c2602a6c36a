package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Create builds and starts the machine's domain, or adopts the one a
// previous attempt made (starting it if it is off). A domain with the
// derived name that is not ours is never touched: backend.ErrNotOurs.
func (b *Backend) Create(ctx context.Context, spec backend.MachineSpec) (backend.Placement, error) {
	if spec.MachineID == "" {
		return backend.Placement{}, errors.New("create: empty machine id")
	}
	h, err := b.host(spec.Zone)
	if err != nil {
		return backend.Placement{}, fmt.Errorf("create: %w", err)
	}
	name := DomainName(b.cfg.Provider, spec.MachineID)
	pl := backend.Placement{Zone: h.zone, Domain: name}
	start := time.Now()
	err = h.withConn(func(conn *libvirt.Connect) error {
		dom, err := conn.LookupDomainByName(name)
		if err == nil {
			defer dom.Free()
			return b.adopt(ctx, dom, name, spec)
		}
		if !isNoDomain(err) {
			return fmt.Errorf("create: look up domain: %w", err)
		}
		return b.build(ctx, h, conn, name, spec)
	})
	if err != nil {
		return backend.Placement{}, err
	}
	b.log.Info("domain created", "zone", h.zone, "domain", name, "machine", spec.MachineID,
		"op", spec.OperationID, "took", time.Since(start).Round(time.Millisecond).String())
	return pl, nil
}

// adopt takes over our own domain left by an earlier attempt of this
// machine's Create, starting it if it is not running.
func (b *Backend) adopt(ctx context.Context, dom *libvirt.Domain, name string, spec backend.MachineSpec) error {
	if _, err := b.owned(dom, name, spec.MachineID); err != nil {
		return fmt.Errorf("create: %w", err)
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
	if err := waitRunning(ctx, dom); err != nil {
		return fmt.Errorf("create: adopt: wait running: %w", err)
	}
	b.log.Info("adopted existing domain", "domain", name, "machine", spec.MachineID, "was_running", active)
	return nil
}

// build makes the volumes and the domain. Every piece it creates is pushed
// on undo; on failure exactly those are removed, newest first. Undo steps
// look their object up again by name on conn (which outlives build), since
// the handles used here are freed before the deferred rollback runs.
func (b *Backend) build(ctx context.Context, h *host, conn *libvirt.Connect, name string, spec backend.MachineSpec) (err error) {
	var undo rollback
	defer func() {
		if err != nil {
			if rerr := undo.run(b.log.With("domain", name)); rerr != nil {
				err = fmt.Errorf("%w (rollback incomplete: %v)", err, rerr)
			}
		}
	}()
	// step names the failing step in the error, and times the good ones
	// (logged at debug: where a slow Create spends its time).
	var took []any
	mark := time.Now()
	step := func(what string, e error) error {
		if e == nil {
			e = ctx.Err()
		}
		if e != nil {
			return fmt.Errorf("create: %s: %w", what, e)
		}
		took = append(took, slog.String(strings.ReplaceAll(what, " ", "_"), time.Since(mark).Round(time.Millisecond).String()))
		mark = time.Now()
		return nil
	}
	defer func() {
		if err == nil {
			b.log.Debug("create steps", append([]any{"domain", name}, took...)...)
		}
	}()
	pool, err := conn.LookupStoragePoolByName(b.cfg.Pool)
	if err != nil {
		err = fmt.Errorf("%s: %w", b.cfg.Pool, err)
	}
	if err := step("storage pool", err); err != nil {
		return err
	}
	defer pool.Free()
	g, err := readGolden(pool, b.cfg.Image)
	if err := step("golden image", err); err != nil {
		return err
	}
	ovName := overlayName(name)
	if ovName == b.cfg.Image {
		return fmt.Errorf("create: overlay volume: name %q: %w", ovName, errGolden)
	}
	ovPath, created, err := ensureOverlay(pool, ovName, g)
	if created {
		undo.push("delete overlay volume", func() error { return b.deleteVolumeIn(conn, ovName) })
	}
	if err := step("overlay volume", err); err != nil {
		return err
	}
	seedPath, err := b.ensureSeed(conn, pool, name, &undo)
	if err := step("seed volume", err); err != nil {
		return err
	}
	dom, err := b.define(h, conn, name, spec, ovPath, seedPath)
	if dom != nil {
		undo.push("undefine domain", func() error { return onDomain(conn, name, undefine) })
	}
	if err := step("define domain", err); err != nil {
		return err
	}
	defer dom.Free()
	err = dom.Create()
	if err == nil {
		undo.push("destroy domain", func() error { return onDomain(conn, name, destroy) })
	}
	if err := step("start domain", err); err != nil {
		return err
	}
	return step("wait running", waitRunning(ctx, dom))
}

// define renders the domain XML and defines it.
func (b *Backend) define(h *host, conn *libvirt.Connect, name string, spec backend.MachineSpec,
	overlay, seed string) (*libvirt.Domain, error) {
	md, err := Metadata{Provider: b.cfg.Provider, MachineID: spec.MachineID, OperationID: spec.OperationID}.Marshal(true)
	if err != nil {
		return nil, err
	}
	domType := h.domainType()
	if domType == "" {
		return nil, errors.New("host capabilities offer no x86_64 hvm domain type")
	}
	x, err := buildDomain(domainParams{
		Name: name, Type: domType, VCPU: max(spec.VCPU, 1), MemoryMiB: max(spec.MemoryMiB, 64),
		Overlay: overlay, OverlayFmt: "qcow2", Seed: seed, Network: b.cfg.Network,
		Kernel: b.cfg.Kernel, Initrd: b.cfg.Initrd, Cmdline: b.cfg.Cmdline, Metadata: md,
	}).Marshal()
	if err != nil {
		return nil, fmt.Errorf("render xml: %w", err)
	}
	return conn.DomainDefineXML(x)
}

// rollback is the list of undo steps of one Create attempt.
type rollback struct {
	steps []undoStep
}

type undoStep struct {
	what string
	fn   func() error
}

func (r *rollback) push(what string, fn func() error) {
	r.steps = append(r.steps, undoStep{what, fn})
}

// run undoes newest first and keeps going past failures so as much as
// possible is cleaned; it reports what it could not undo.
func (r *rollback) run(log *slog.Logger) error {
	var errs []error
	for i := len(r.steps) - 1; i >= 0; i-- {
		s := r.steps[i]
		if err := s.fn(); err != nil {
			log.Warn("create rollback step failed", "step", s.what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
			continue
		}
		log.Info("create rolled back", "step", s.what)
	}
	return errors.Join(errs...)
}
