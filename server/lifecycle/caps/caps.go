// Package caps asks a backend, once, which optional features it has
// (package backend's optional interfaces), so the engine and reconcile
// read one struct instead of asserting interfaces wherever they need one.
package caps

import "github.com/bigfleet/libvirt-provider/backend"

// Capabilities are a backend's optional features: each field is the
// backend itself when it implements that interface, nil when it does not.
type Capabilities struct {
	// ZoneStreamer lists zone by zone as their hosts answer (reconcile).
	ZoneStreamer backend.ZoneStreamer
	// ZoneReadiness, HostReadiness and PlacementReadiness say whether a
	// zone's host, a named host, or a machine's own host can be asked now.
	ZoneReadiness      backend.ZoneReadiness
	HostReadiness      backend.HostReadiness
	PlacementReadiness backend.PlacementReadiness
	// Placer chooses among a zone's hosts before a Create.
	Placer backend.Placer
	// Confirmer confirms a VM missing from a listing is gone (reconcile).
	Confirmer backend.Confirmer
	// Starter starts a stopped domain again (reconcile).
	Starter backend.Starter
	// CopyRemover removes a machine's spare copy on another host (reconcile).
	CopyRemover backend.CopyRemover
	// MigrationRecoverer recovers a migration cut by a restart (reconcile).
	MigrationRecoverer backend.MigrationRecoverer
	// FencedDestroyer destroys a stale copy on a host declared down
	// (reconcile's fenced rejoin).
	FencedDestroyer backend.FencedDestroyer
	// MarkClearer removes a fence mark from a machine's domain (admin).
	MarkClearer backend.MarkClearer
	// Migrator live-migrates a machine (admin).
	Migrator backend.Migrator
	// Abandoner cleans a guest after a Configure cut by a restart.
	Abandoner backend.Abandoner
	// ConfigureProber asks the guest what became of a Configure cut by a
	// restart, to roll it back or finish it instead of failing it.
	ConfigureProber backend.ConfigureProber
	// GuestAddresser reads the guest's addresses after a Configure.
	GuestAddresser backend.GuestAddresser
	// ReconcileRequester asks for a pass when the backend learns of a
	// change only a pass can judge (an abandoned call that succeeded late).
	ReconcileRequester backend.ReconcileRequester
}

// Of asks be for each optional feature.
func Of(be backend.Backend) Capabilities {
	var c Capabilities
	c.ZoneStreamer, _ = be.(backend.ZoneStreamer)
	c.ZoneReadiness, _ = be.(backend.ZoneReadiness)
	c.HostReadiness, _ = be.(backend.HostReadiness)
	c.PlacementReadiness, _ = be.(backend.PlacementReadiness)
	c.Placer, _ = be.(backend.Placer)
	c.Confirmer, _ = be.(backend.Confirmer)
	c.Starter, _ = be.(backend.Starter)
	c.CopyRemover, _ = be.(backend.CopyRemover)
	c.MigrationRecoverer, _ = be.(backend.MigrationRecoverer)
	c.Migrator, _ = be.(backend.Migrator)
	c.MarkClearer, _ = be.(backend.MarkClearer)
	c.FencedDestroyer, _ = be.(backend.FencedDestroyer)
	c.Abandoner, _ = be.(backend.Abandoner)
	c.ConfigureProber, _ = be.(backend.ConfigureProber)
	c.GuestAddresser, _ = be.(backend.GuestAddresser)
	c.ReconcileRequester, _ = be.(backend.ReconcileRequester)
	return c
}
