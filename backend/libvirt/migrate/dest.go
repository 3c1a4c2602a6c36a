package migrate

import (
	"fmt"
	"sync"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/bigfleet/libvirt-provider/backend/libvirt/guestfit"
	"github.com/bigfleet/libvirt-provider/backend/libvirt/virt"
)

// A live migration's destination must be able to run the guest as it runs
// now: its exact machine type (a domain defined on QEMU 10 is
// pc-i440fx-10.0, which QEMU 7.2 lacks) and its CPU. Placement cannot know
// that, so the hosts that cannot are ruled out before it chooses, each
// with its reason, which a refusal then names (issue 38 item 7).

// fitParallel bounds how many hosts' capabilities one migration reads at
// once (a zone's first migration after a reconnect reads every host's).
const fitParallel = 8

// GuestOn reads what the domain needs of a host from its migratable
// definition on src (what a destination is given).
func GuestOn(src End, name string) (guestfit.Guest, error) {
	var g guestfit.Guest
	err := src.WithDomain(name, func(_ virt.Conn, dom virt.Domain) error {
		x, err := dom.GetXMLDesc(libvirt.DOMAIN_XML_MIGRATABLE)
		if err != nil {
			return fmt.Errorf("migratable XML of %s: %w", name, err)
		}
		var d libvirtxml.Domain
		if err := d.Unmarshal(x); err != nil {
			return fmt.Errorf("parse the XML of %s: %w", name, err)
		}
		g = guestfit.Of(&d)
		return nil
	})
	if err != nil {
		return g, fmt.Errorf("host %s: %w", src.Name, err)
	}
	return g, nil
}

// Refused judges the candidates (the zone's connected hosts other than
// the source, or the one asked for) and returns each that cannot run g
// with why. A
// host whose facts cannot be read is ruled out too, with the cause: its
// link is failing, and so would a migration to it.
func (mv *Mover) Refused(zone string, candidates []End, g guestfit.Guest) map[string]string {
	refused, unchecked := map[string]string{}, map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, fitParallel)
	for _, h := range candidates {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			v := h.refuses(g)
			mu.Lock()
			defer mu.Unlock()
			if v.Refused != "" {
				refused[h.Name] = v.Refused
			} else if v.Unchecked != "" {
				unchecked[h.Name] = v.Unchecked
			}
		})
	}
	wg.Wait()
	if len(unchecked) > 0 {
		mv.Log.Info("migration: not everything about the guest could be checked on these hosts; the migration itself will tell",
			"zone", zone, "guest", g.String(), "unchecked", unchecked)
	}
	return refused
}

// refuses judges whether h can run g, from its facts cached for its
// current connection; a host whose capabilities cannot be read is refused
// with the cause.
func (h End) refuses(g guestfit.Guest) guestfit.Verdict {
	var v guestfit.Verdict
	err := h.With(func(conn virt.Conn) error {
		var err error
		v, err = h.Fit.Refuses(h.Link(), conn, g, h.DomainType().Type)
		return err
	})
	if err != nil {
		return guestfit.Verdict{Refused: fmt.Sprintf("its QEMU's capabilities could not be read: %v", err)}
	}
	return v
}
