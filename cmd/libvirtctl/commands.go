package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// maxBlobBytes matches the contract's cap on bootstrap_blob.
const maxBlobBytes = 4 << 20

func cmdList(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	res, err := c.admin.ListMachines(ctx, connect.NewRequest(&adminv1.ListMachinesRequest{
		States: o.states, Zones: o.zones, MaxResults: int32(o.max)}))
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
	if n, total := len(res.Msg.GetMachines()), int(res.Msg.GetTotalMatched()); n < total {
		fmt.Fprintf(w, "(%d of %d shown; raise --max)\n", n, total)
	}
	return nil
}

func cmdGet(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	res, err := c.admin.GetMachine(ctx, connect.NewRequest(&adminv1.GetMachineRequest{Id: id}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg.GetMachine())
	}
	m := res.Msg.GetMachine()
	pm := m.GetMachine()
	t := newTable(w, "FIELD", "VALUE")
	t.row("id", pm.GetId())
	t.row("state", stateWithBoot(m))
	if m.GetBootPhase() != "" {
		t.row("boot", m.GetBootPhase()+": "+m.GetBootReason())
	}
	t.row("in state", dur(m.GetTimeInState())+" (since "+stamp(m.GetStateSince())+")")
	t.row("zone", pm.GetZone())
	t.row("instance type", pm.GetInstanceType())
	t.row("capacity type", pm.GetCapacityType().String())
	t.row("price per hour", strconv.FormatFloat(pm.GetPricePerHour(), 'f', -1, 64))
	t.row("host", pm.GetHost().GetProvider()+" "+pm.GetHost().GetRef())
	t.row("domain", m.GetDomain())
	t.row("addresses", strings.Join(m.GetAddresses(), ", "))
	t.row("cluster", pm.GetCluster())
	t.row("operation", m.GetOperationKind()+" "+m.GetOperationId())
	if m.GetOperationDeadline() != nil {
		t.row("deadline", stamp(m.GetOperationDeadline()))
	}
	t.row("last error", pm.GetLastError())
	t.row("allocatable", kv(pm.GetAllocatable().GetResources()))
	t.row("resources", kv(pm.GetResources().GetResources()))
	t.row("labels", kv(pm.GetLabels()))
	t.row("shard metadata", kv(pm.GetShardMetadata()))
	t.row("revision", strconv.FormatUint(m.GetRevision(), 10))
	return t.flush()
}

func kv(m map[string]string) string {
	s := ""
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s=%q", k, m[k])
	}
	return s
}

func cmdHistory(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	res, err := c.admin.GetMachineHistory(ctx, connect.NewRequest(&adminv1.GetMachineHistoryRequest{Id: id}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	t := newTable(w, "STARTED", "KIND", "FROM", "TO", "DURATION", "OUTCOME", "OPERATION", "LAST ERROR", "NOTE")
	for _, h := range res.Msg.GetTransitions() {
		t.row(stamp(h.GetStarted()), h.GetKind(), stateName(h.GetFromState()), stateName(h.GetToState()),
			dur(h.GetDuration()), h.GetOutcome(), h.GetOperationId(), truncate(h.GetLastError(), 60), h.GetNote())
	}
	return t.flush()
}

func cmdSummary(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	res, err := c.admin.GetFleetSummary(ctx, connect.NewRequest(&adminv1.GetFleetSummaryRequest{}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	states := []pb.MachineState{1, 2, 3, 4, 5, 6, 7, 8}
	header := []string{"ZONE"}
	for _, s := range states {
		header = append(header, stateName(s))
	}
	t := newTable(w, append(header, "TOTAL")...)
	byZone := map[string]map[pb.MachineState]int32{}
	for _, c := range res.Msg.GetCounts() {
		if byZone[c.GetZone()] == nil {
			byZone[c.GetZone()] = map[pb.MachineState]int32{}
		}
		byZone[c.GetZone()][c.GetState()] += c.GetCount()
	}
	for _, z := range slices.Sorted(maps.Keys(byZone)) {
		row, total := []string{z}, int32(0)
		for _, s := range states {
			row = append(row, strconv.Itoa(int(byZone[z][s])))
			total += byZone[z][s]
		}
		t.row(append(row, strconv.Itoa(int(total)))...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	r := res.Msg.GetLastReconcile()
	fmt.Fprintf(w, "machines: %d; last reconcile: %s (adopted %d, vanished %d); admin writes: %v\n",
		res.Msg.GetTotal(), orNever(stamp(r.GetTime())), r.GetAdopted(), r.GetVanished(), onOff(res.Msg.GetAdminWrite()))
	for _, wait := range r.GetWaiting() {
		fmt.Fprintf(w, "waiting: %s\n", wait)
	}
	return nil
}

func orNever(s string) string {
	if s == "" {
		return "never"
	}
	return s
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func cmdMarks(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	res, err := c.admin.ListFenceMarks(ctx, connect.NewRequest(&adminv1.ListFenceMarksRequest{ShardId: o.marksShard}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	t := newTable(w, "SHARD", "MACHINE", "EPOCH", "SEQUENCE")
	for _, s := range res.Msg.GetShards() {
		for _, m := range s.GetMarks() {
			t.row(s.GetShardId(), m.GetMachineId(), strconv.FormatInt(m.GetEpoch(), 10), strconv.FormatInt(m.GetSequence(), 10))
		}
	}
	return t.flush()
}

// cmdWatch prints the snapshot as a table, then one line per change.
func cmdWatch(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	st, err := c.admin.WatchMachines(ctx, connect.NewRequest(&adminv1.WatchMachinesRequest{}))
	if err != nil {
		return err
	}
	defer st.Close()
	changes := 0
	var snap []*adminv1.AdminMachine
	for st.Receive() {
		ev := st.Msg()
		if o.output == "json" {
			if err := writeJSONLine(w, ev); err != nil {
				return err
			}
		}
		switch ev.GetType() {
		case adminv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT:
			snap = append(snap, ev.GetMachines()...)
		case adminv1.WatchEventType_WATCH_EVENT_TYPE_SYNCED:
			if o.output == "table" {
				t := newTable(w, machineHeader()...)
				for _, m := range snap {
					t.row(machineRow(m)...)
				}
				if err := t.flush(); err != nil {
					return err
				}
				fmt.Fprintf(w, "-- %d machines; watching for changes --\n", len(snap))
			}
			snap = nil
		case adminv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED:
			if o.output == "table" {
				at := ev.GetServerTime().AsTime().Local().Format("15:04:05.000")
				for _, m := range ev.GetMachines() {
					pm := m.GetMachine()
					fmt.Fprintf(w, "%s  %-12s %-12s zone=%s host=%s cluster=%s op=%s %s\n", at, pm.GetId(),
						stateName(pm.GetState()), pm.GetZone(), dash(pm.GetHost().GetRef()), dash(pm.GetCluster()),
						dash(m.GetOperationKind()), errNote(pm.GetLastError()))
				}
			}
			changes++
			if o.events > 0 && changes >= o.events {
				return nil
			}
		}
	}
	if err := st.Err(); err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func errNote(s string) string {
	if s == "" {
		return ""
	}
	return "error=" + strconv.Quote(truncate(s, 80))
}

// token is the lifecycle call's fencing token. Without --shard, a client
// certificate naming one shard (URI SAN bigfleet://shard/<id>) supplies
// it: a provider under --caller-identity=bigfleet accepts a mutation only
// with that shard id. A token with a shard but no --seq gets the current
// time in nanoseconds as its sequence, so each call is newer than the last
// one made this way at the same epoch.
func token(o *opts) (string, int64, int64) {
	shard, seq := o.shard, o.seq
	if shard == "" {
		shard = certShard(o.tlsCert)
	}
	if shard != "" && !o.seqSet {
		seq = time.Now().UnixNano()
	}
	return shard, o.epoch, seq
}

// certShard is the shard a client certificate file names, or "" (no
// file, unreadable, or not exactly one bigfleet://shard/<id> URI SAN; the
// provider says which in its PermissionDenied).
func certShard(file string) string {
	if file == "" {
		return ""
	}
	pemBytes, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return ""
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	shard, n := "", 0
	for _, u := range c.URIs {
		if u.Scheme != "bigfleet" {
			continue
		}
		n++
		if id, ok := strings.CutPrefix(u.Path, "/"); ok && u.Host == "shard" {
			shard = id
		}
	}
	if n != 1 {
		return ""
	}
	return shard
}

func printAck(w io.Writer, o *opts, ack *pb.TransitionAck) error {
	if o.output == "json" {
		return writeJSON(w, ack)
	}
	m := ack.GetMachine()
	t := newTable(w, "ID", "STATE", "ZONE", "HOST", "CLUSTER", "OPERATION")
	t.row(m.GetId(), stateName(m.GetState()), m.GetZone(), m.GetHost().GetRef(), m.GetCluster(), ack.GetOperationId())
	return t.flush()
}

func cmdCreate(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	shard, epoch, seq := token(o)
	res, err := c.provider.Create(ctx, connect.NewRequest(&pb.CreateRequest{
		MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}))
	if err != nil {
		return err
	}
	return printAck(w, o, res.Msg)
}

func cmdConfigure(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	if o.cluster == "" || o.blobFile == "" {
		return usagef("configure needs --cluster and --blob-file")
	}
	blob, err := readBlob(o.blobFile)
	if err != nil {
		return err
	}
	shard, epoch, seq := token(o)
	res, err := c.provider.Configure(ctx, connect.NewRequest(&pb.ConfigureRequest{
		MachineId: id, ClusterId: o.cluster, BootstrapBlob: blob, ShardMetadata: o.metadata,
		ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}))
	if err != nil {
		return err
	}
	return printAck(w, o, res.Msg)
}

// readBlob reads the bootstrap blob without ever printing it.
func readBlob(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--blob-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBlobBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--blob-file: %w", err)
	}
	if len(b) > maxBlobBytes {
		return nil, fmt.Errorf("--blob-file: %s is over the %d MiB cap", path, maxBlobBytes>>20)
	}
	return b, nil
}

func cmdDrain(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	if o.grace < 0 {
		return usagef("drain needs --grace SECONDS (0 for none)")
	}
	shard, epoch, seq := token(o)
	res, err := c.provider.Drain(ctx, connect.NewRequest(&pb.DrainRequest{
		MachineId: id, GracePeriodSeconds: o.grace, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}))
	if err != nil {
		return err
	}
	return printAck(w, o, res.Msg)
}

func cmdDelete(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	shard, epoch, seq := token(o)
	res, err := c.provider.Delete(ctx, connect.NewRequest(&pb.DeleteRequest{
		MachineId: id, ShardId: shard, ShardEpoch: epoch, SequenceNumber: seq}))
	if err != nil {
		return err
	}
	return printAck(w, o, res.Msg)
}

func cmdRelease(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	res, err := c.admin.ReleaseMachine(ctx, connect.NewRequest(&adminv1.ReleaseMachineRequest{Id: id}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	t := newTable(w, machineHeader()...)
	t.row(machineRow(res.Msg.GetMachine())...)
	return t.flush()
}

func cmdReconcile(ctx context.Context, c *clients, o *opts, _ string, w io.Writer) error {
	start := time.Now()
	res, err := c.admin.TriggerReconcile(ctx, connect.NewRequest(&adminv1.TriggerReconcileRequest{}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	r := res.Msg.GetReconcile()
	fmt.Fprintf(w, "reconciled in %s: adopted %d, vanished %d\n", human(time.Since(start)), r.GetAdopted(), r.GetVanished())
	t := newTable(w, "ZONE", "OUTCOME")
	for _, z := range r.GetZones() {
		out := "ok"
		if z.GetError() != "" {
			out = z.GetError()
		}
		t.row(z.GetZone(), out)
	}
	return t.flush()
}
