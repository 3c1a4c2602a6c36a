package admin

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/server/convert"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

const (
	// watchBuffer is how many changes may queue for one slow client before
	// it is resynchronised with a fresh snapshot.
	watchBuffer = 1024
	// chunk caps the machines per streamed message, keeping each well below
	// clients' default 4 MiB receive limit even for very large fleets.
	chunk = 512
)

// errResync ends one watch round: the client fell behind and gets a new
// snapshot.
var errResync = errors.New("watcher lost changes; resynchronising")

func (s *Service) WatchMachines(ctx context.Context, _ *connect.Request[adminv1.WatchMachinesRequest], stream *connect.ServerStream[adminv1.WatchMachinesResponse]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		ch, lost, cancel := s.eng.Watch(watchBuffer)
		err := s.watchRound(ctx, ch, lost, stream)
		cancel()
		switch {
		case errors.Is(err, errResync):
			s.log.Info("admin watch fell behind; resending snapshot")
			continue
		case ctx.Err() != nil:
			return nil // the client went away: a normal end of a watch
		}
		return err
	}
}

// watchRound sends a snapshot and then the changes from ch. Subscribing
// before the snapshot means nothing published in between is missed; what
// both carry is deduplicated by revision.
func (s *Service) watchRound(ctx context.Context, ch <-chan record.Machine, lost func() bool,
	stream *connect.ServerStream[adminv1.WatchMachinesResponse]) error {
	all, err := s.all(ctx)
	if err != nil {
		return convert.WireError(err)
	}
	seen := make(map[string]uint64, len(all))
	boots := s.newBootTrack()
	now := s.now()
	for i := 0; i == 0 || i < len(all); i += chunk {
		part := all[i:min(i+chunk, len(all))]
		msg := &adminv1.WatchMachinesResponse{Type: adminv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, ServerTime: ts(now)}
		for _, m := range part {
			seen[m.ID] = m.Revision
			msg.Machines = append(msg.Machines, s.machineView(m, now))
			boots.note(m, msg.Machines[len(msg.Machines)-1])
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
	if err := stream.Send(&adminv1.WatchMachinesResponse{Type: adminv1.WatchEventType_WATCH_EVENT_TYPE_SYNCED, ServerTime: ts(now)}); err != nil {
		return err
	}
	beat := time.NewTimer(s.heartbeat)
	defer beat.Stop()
	bootTick, stopBoot := boots.ticker()
	defer stopBoot()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-bootTick:
			if ms := s.bootChanges(boots, s.now()); len(ms) > 0 {
				// Same revisions: clients take a record whose boot status differs.
				if err := stream.Send(&adminv1.WatchMachinesResponse{Type: adminv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED,
					ServerTime: ts(s.now()), Machines: ms}); err != nil {
					return err
				}
				beat.Reset(s.heartbeat)
			}
		case <-beat.C:
			if err := stream.Send(&adminv1.WatchMachinesResponse{Type: adminv1.WatchEventType_WATCH_EVENT_TYPE_HEARTBEAT, ServerTime: ts(s.now())}); err != nil {
				return err
			}
			beat.Reset(s.heartbeat)
		case m, ok := <-ch:
			if !ok {
				return errResync
			}
			batch := drain(m, ch)
			if lost() {
				return errResync
			}
			now := s.now()
			msg := &adminv1.WatchMachinesResponse{Type: adminv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED, ServerTime: ts(now)}
			for _, m := range batch {
				if m.Revision <= seen[m.ID] {
					continue // already in the snapshot or sent
				}
				seen[m.ID] = m.Revision
				msg.Machines = append(msg.Machines, s.machineView(m, now))
				boots.note(m, msg.Machines[len(msg.Machines)-1])
			}
			if len(msg.Machines) == 0 {
				continue
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
			beat.Reset(s.heartbeat)
		}
	}
}

// drain takes what else is already queued (up to one chunk), keeping only
// the newest record per machine, so a burst goes out as one message.
func drain(first record.Machine, ch <-chan record.Machine) []record.Machine {
	out := []record.Machine{first}
	pos := map[string]int{first.ID: 0}
	for len(out) < chunk {
		select {
		case m, ok := <-ch:
			if !ok {
				return out
			}
			if i, dup := pos[m.ID]; dup {
				if m.Revision > out[i].Revision {
					out[i] = m
				}
				continue
			}
			pos[m.ID] = len(out)
			out = append(out, m)
		default:
			return out
		}
	}
	return out
}

// all returns every machine record, ordered by id. A full engine List
// never hides a machine, so one call is enough.
func (s *Service) all(ctx context.Context) ([]record.Machine, error) {
	res, err := s.eng.List(ctx, record.ListQuery{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(res.Machines, func(a, b record.Machine) int { return cmp.Compare(a.ID, b.ID) })
	return res.Machines, nil
}
