package main

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// cmdFenceClear removes one shard's fence mark on a machine and says what
// it removed and how many shards are left against the bound.
func cmdFenceClear(ctx context.Context, c *clients, o *opts, id string, w io.Writer) error {
	if o.clearShard == "" {
		return usagef("fence clear needs --shard (marks --shard … or marks lists the shards with marks)")
	}
	res, err := c.admin.ClearFenceMark(ctx, connect.NewRequest(&adminv1.ClearFenceMarkRequest{MachineId: id, ShardId: o.clearShard}))
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeJSON(w, res.Msg)
	}
	r := res.Msg
	fmt.Fprintf(w, "cleared the fence mark of shard %q on %s (epoch %d, sequence %d); %d of %d shards hold marks there now\n",
		o.clearShard, id, r.GetCleared().GetEpoch(), r.GetCleared().GetSequence(), r.GetShardsLeft(), r.GetShardsPerMachineLimit())
	return nil
}
