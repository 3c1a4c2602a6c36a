package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

func hostHeader() []string {
	return []string{"ZONE", "HOST", "URI", "CONNECTED", "CORDONED", "DOWN", "VCPUS USED/PLACEABLE", "MEMORY USED/PLACEABLE",
		"POOL FREE", "MACHINES", "DOMAINS", "LIBVIRT", "RECONCILE"}
}

func hostRow(h *adminv1.Host) []string {
	conn := "yes"
	if !h.GetConnected() {
		conn = "no: " + truncate(h.GetLastError(), 40)
	}
	c := h.GetCapacity()
	pool := "-"
	if c.GetPoolFreeBytes() > 0 {
		pool = bytesIEC(c.GetPoolFreeBytes())
	}
	return []string{h.GetZone(), h.GetName(), h.GetUri(), conn, cordonNote(h), downNote(h),
		usedOf(strconv.Itoa(int(c.GetVcpusUsed())), strconv.Itoa(int(c.GetVcpusPlaceable())), c.GetVcpusPlaceable() > 0, c.GetVcpus() > 0, strconv.Itoa(int(c.GetVcpus()))),
		usedOf(bytesIEC(c.GetMemoryUsedBytes()), bytesIEC(c.GetMemoryPlaceableBytes()), c.GetMemoryPlaceableBytes() > 0, c.GetMemoryBytes() > 0, bytesIEC(c.GetMemoryBytes())),
		pool, strconv.Itoa(int(h.GetHostMachineCount())), strconv.Itoa(int(h.GetDomainCount())),
		dash(h.GetLibvirtVersion()), truncate(h.GetLastReconcileOutcome(), 40)}
}

// usedOf reads "used/placeable"; a host whose capacity is not enforced
// shows its use against its size instead, so nobody takes it for a limit.
func usedOf(used, placeable string, enforced, sized bool, size string) string {
	switch {
	case enforced:
		return used + "/" + placeable
	case sized:
		return used + " (size " + size + ", not enforced)"
	}
	return used
}

func cordonNote(h *adminv1.Host) string {
	if !h.GetCordoned() {
		return "no"
	}
	c := h.GetCordon()
	note := "yes, by " + c.GetBy()
	if c.GetReason() != "" {
		note += ": " + truncate(c.GetReason(), 40)
	}
	return note
}

// downNote says who declared the host down and why: the reason is how
// the host is known to be off, what whoever ends the declaration checks.
func downNote(h *adminv1.Host) string {
	d := h.GetDown()
	if d == nil {
		return "no"
	}
	note := "yes"
	if d.GetBy() != "" {
		note += ", by " + d.GetBy()
	}
	return note + ": " + truncate(d.GetReason(), 40)
}

func cmdHosts(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	res, err := c.admin.ListHosts(ctx, connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	t := newTable(w, hostHeader()...)
	for _, h := range res.Msg.GetHosts() {
		t.row(hostRow(h)...)
	}
	return t.flush()
}

func printHost(w io.Writer, o *opts, h *adminv1.Host) error {
	if o.output == "json" {
		return writeJSON(w, h)
	}
	t := newTable(w, hostHeader()...)
	t.row(hostRow(h)...)
	if err := t.flush(); err != nil {
		return err
	}
	if n := h.GetHostMachineCount(); h.GetCordoned() && n > 0 {
		fmt.Fprintf(w, "%d machines are on %s; 'libvirtctl drain-list %s' lists them\n", n, h.GetName(), h.GetName())
	}
	return nil
}

func cmdCordon(ctx context.Context, c *clients, o *opts, host string, w io.Writer) error {
	res, err := c.admin.CordonHost(ctx, connect.NewRequest(&adminv1.CordonHostRequest{Host: host, Reason: o.reason}))
	if err != nil {
		return err
	}
	return printHost(w, o, res.Msg.GetHost())
}

func cmdUncordon(ctx context.Context, c *clients, o *opts, host string, w io.Writer) error {
	res, err := c.admin.UncordonHost(ctx, connect.NewRequest(&adminv1.UncordonHostRequest{Host: host}))
	if err != nil {
		return err
	}
	return printHost(w, o, res.Msg.GetHost())
}

// cmdDown declares a host down. The provider checks the request (a
// reason is required), so the refusal and its code are the server's.
func cmdDown(ctx context.Context, c *clients, o *opts, host string, w io.Writer) error {
	res, err := c.admin.DeclareHostDown(ctx, connect.NewRequest(&adminv1.DeclareHostDownRequest{Host: host, Reason: o.reason}))
	if err != nil {
		return err
	}
	if err := printHost(w, o, res.Msg.GetHost()); err != nil || o.output == "json" {
		return err
	}
	_, err = fmt.Fprintf(w, "%s is declared down; 'libvirtctl up %s' ends the declaration\n", host, host)
	return err
}

func cmdUp(ctx context.Context, c *clients, o *opts, host string, w io.Writer) error {
	res, err := c.admin.DeclareHostUp(ctx, connect.NewRequest(&adminv1.DeclareHostUpRequest{Host: host}))
	if err != nil {
		return err
	}
	return printHost(w, o, res.Msg.GetHost())
}

// cmdDrainList lists the machines whose VM is on host: with the host
// cordoned, what has to move off (by BigFleet draining and deleting them,
// or a migration) before the host can be taken down.
func cmdDrainList(ctx context.Context, c *clients, o *opts, host string, w io.Writer) error {
	// A mistyped name would list nothing, which reads as "nothing to move".
	hosts, err := c.admin.ListHosts(ctx, connect.NewRequest(&adminv1.ListHostsRequest{}))
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(hosts.Msg.GetHosts(), func(h *adminv1.Host) bool { return h.GetName() == host }) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no host named %q ('libvirtctl hosts' lists them)", host))
	}
	res, err := c.admin.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{Hosts: []string{host}}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	t := newTable(w, machineHeader()...)
	for _, m := range res.Msg.GetMachines() {
		t.row(machineRow(m)...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d machines on %s\n", len(res.Msg.GetMachines()), host)
	return nil
}
