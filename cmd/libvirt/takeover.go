package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bigfleet/libvirt-provider/server/intents"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// journalSuffix names the shared journal after the Lease: the chart
// creates "<lease>-intents", empty, and grants get and update on it.
const journalSuffix = "-intents"

// newJournal is the shared journal's ConfigMap (docs/ha.md, "The
// journal"), checked once: a missing one or missing rights stop the
// process at startup, naming it. Each request is bounded like a libvirt
// call, so a leader that lost its lease is out of it before the lease
// can expire (validateLeader keeps that bound inside the margin).
//
// The journal has its own client: client-go's rate limiter (5 requests
// a second by default) would otherwise both delay every acknowledgement
// (two writes per Create: 400 ms measured) and make the Lease's renewals
// queue behind the journal's writes. Its writes need no limiter: at most
// one is in flight, the others coalesce behind it.
func (e *election) newJournal(ctx context.Context, rc *rest.Config) error {
	rc = rest.CopyConfig(rc)
	rc.QPS = -1 // no client-side rate limit
	rc.UserAgent = "bigfleet-libvirt-provider/" + e.cfg.Identity + "/journal"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	ns, name := e.cfg.Namespace, e.cfg.Name+journalSuffix
	e.journal = intents.NewJournal(cs.CoreV1().ConfigMaps(ns), ns, name, e.cfg.Identity, e.d.cfg.LibvirtCallTimeout)
	if err := e.journal.Check(ctx); err != nil {
		return fmt.Errorf("--leader-elect: %w", err)
	}
	return nil
}

// hostJournal is admin.Options.HostJournal under --leader-elect: a cordon
// or down change is shared before it is applied, and refused (Unavailable,
// with the cause) when it cannot be, or before this replica leads.
func hostJournal(shared *atomic.Pointer[intents.Store]) func(kind string, file []byte) error {
	return func(kind string, file []byte) error {
		js := shared.Load()
		if js == nil {
			return &record.Error{Code: record.CodeUnavailable, Msg: "standby: not the leader; retry"}
		}
		ctx, cancel := context.WithTimeout(context.Background(), journalWait)
		defer cancel()
		// admin's kinds are intents' (TestHostFileKinds).
		if err := js.SaveHostFile(ctx, kind, file); err != nil {
			return &record.Error{Code: record.CodeUnavailable, Msg: "the shared journal refused the change: " + err.Error()}
		}
		return nil
	}
}

// journalWait bounds an admin write's wait for the journal.
const journalWait = 10 * time.Second

// takeOver is what a new leader does before its engine starts: claim the
// journal (a late write of the old leader now conflicts and fails), put
// its transitional and recently ended machines and its fence marks in the
// local store, apply
// its cordons and down declarations, then build the engine on the
// journaling store. The engine then resumes each cut operation by its
// usual restart rules (a Create or Delete redone, a Configure ended as the
// guest tells), and fences with every mark the old leader acknowledged.
func (d *daemon) takeOver(ctx context.Context) (*lifecycle.Engine, error) {
	e := d.election
	start := time.Now()
	c, err := e.journal.Claim(ctx)
	if err != nil {
		return nil, err
	}
	b := record.Batch{Marks: c.Marks}
	for _, id := range slices.Sorted(maps.Keys(c.Transitional)) {
		b.Machines = append(b.Machines, c.Transitional[id])
	}
	for _, id := range slices.Sorted(maps.Keys(c.Ended)) {
		b.Machines = append(b.Machines, c.Ended[id])
	}
	if len(b.Machines)+len(b.Marks) > 0 {
		if err := d.st.Commit(ctx, b); err != nil {
			return nil, fmt.Errorf("load the journal into the local store: %w", err)
		}
	}
	js := intents.NewStore(d.st, e.journal, c, d.log.With(slog.String("component", "journal")))
	e.shared.Store(js)
	if err := d.adm.RestoreHostFiles(c.Hosts[intents.HostCordons], c.Hosts[intents.HostDowns]); err != nil {
		return nil, err
	}
	seed := d.seed
	d.seed = nil
	eng, err := d.newEngine(ctx, seed, js)
	if err != nil {
		return nil, err
	}
	d.log.Info("leader: took over the shared journal", slog.String("journal", e.journal.Name()),
		slog.Int("transitional", len(c.Transitional)), slog.Int("ended", len(c.Ended)), slog.Int("marks", len(c.Marks)),
		slog.Int("host_files", len(c.Hosts)), slog.String("took", time.Since(start).Round(time.Millisecond).String()))
	return eng, nil
}
